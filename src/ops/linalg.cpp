// Contractions: dot_general, matmul (numpy semantics), einsum (pairwise, greedy order).
#include <algorithm>
#include <map>
#include <set>

#include "core/errors.h"
#include "ops/common.h"

namespace partix {

using ops::bind;
using ops::to_ints;

Array dot_general(const Array& a, const Array& b, std::vector<int> a_contract,
                  std::vector<int> b_contract, std::vector<int> a_batch,
                  std::vector<int> b_batch, std::optional<DType> out_dtype) {
  ir::Attrs attrs{{"lhs_contract", to_ints(a_contract)}, {"rhs_contract", to_ints(b_contract)}};
  if (!a_batch.empty() || !b_batch.empty()) {
    attrs.set("lhs_batch", to_ints(a_batch));
    attrs.set("rhs_batch", to_ints(b_batch));
  }
  // A quantized operand is decoded inside the matmul, never promoted (its infer checks it).
  if (is_quantized(a.dtype()) || is_quantized(b.dtype())) {
    if (out_dtype && *out_dtype != DType::F32) attrs.set("out_dtype", *out_dtype);
    return detail::bind1("dot_general", {a, b}, attrs);
  }
  // An f32 activation against a bf16 or f16 weight: the weight is widened inside the matmul
  // (exactly, as astype would), never copied to f32.
  if (a.dtype() == DType::F32 && (b.dtype() == DType::BF16 || b.dtype() == DType::F16) &&
      (!out_dtype || *out_dtype == DType::F32)) {
    return detail::bind1("dot_general", {a, b}, attrs);
  }
  DType dt = promote_types(a.dtype(), b.dtype());
  if (out_dtype && *out_dtype != dt) attrs.set("out_dtype", *out_dtype);
  return detail::bind1("dot_general", {astype(a, dt), astype(b, dt)}, attrs);
}

Array matmul(const Array& a, const Array& b) {
  if (!(a.ndim() >= 1 && b.ndim() >= 1)) {
    detail::fail("matmul", "operands must have rank >= 1, got {} and {}",
                 shape_to_string(a.shape()), shape_to_string(b.shape()));
  }
  // Checked on the caller's shapes, before vectors are promoted to matrices.
  int64_t ka = a.shape().back(), kb = b.shape()[static_cast<size_t>(std::max(0, b.ndim() - 2))];
  if (ka != kb) {
    detail::fail("matmul", "contracting sizes differ: {} @ {}", shape_to_string(a.shape()),
                 shape_to_string(b.shape()));
  }
  if (a.ndim() == 1 && b.ndim() == 1) return dot_general(a, b, {0}, {0});  // a scalar
  if (a.ndim() == 1) return squeeze(matmul(expand_dims(a, 0), b), {-2});
  if (b.ndim() == 1) return squeeze(matmul(a, expand_dims(b, 1)), {-1});
  if (b.ndim() == 2) {
    // [..., M, K] @ [K, N]: one contraction, no batch dims.
    return dot_general(a, b, {a.ndim() - 1}, {0});
  }
  // Broadcast the batch dims of both to a common shape.
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = ops::broadcast_shapes("matmul", ba, bb);
  auto full = [&](const Array& x) {
    Shape s = batch;
    s.push_back(x.shape()[static_cast<size_t>(x.ndim() - 2)]);
    s.push_back(x.shape().back());
    return broadcast_to(x, s);
  };
  Array x = full(a), y = full(b);
  int nb = static_cast<int>(batch.size());
  std::vector<int> bd = ops::all_axes(nb);
  return dot_general(x, y, {nb + 1}, {nb}, bd, bd);
}

namespace {

struct Term {
  Array x;
  std::string labels;
};

// Sums out labels of a term that appear nowhere else (neither in other terms nor the output).
Term sum_private(Term t, const std::string& keep) {
  std::vector<int> axes;
  std::string rest;
  for (size_t i = 0; i < t.labels.size(); ++i) {
    if (keep.find(t.labels[i]) == std::string::npos) axes.push_back(static_cast<int>(i));
    else rest += t.labels[i];
  }
  if (!axes.empty()) t.x = sum(t.x, axes);
  t.labels = rest;
  return t;
}

// Contracts two terms: shared labels needed later are batch dims, the rest contract.
Term contract(const Term& a, const Term& b, const std::string& needed_later) {
  std::vector<int> ab, bb, ac, bc;
  std::string batch, af, bf;
  for (size_t i = 0; i < a.labels.size(); ++i) {
    char l = a.labels[i];
    size_t j = b.labels.find(l);
    if (j == std::string::npos) {
      af += l;
    } else if (needed_later.find(l) != std::string::npos) {
      ab.push_back(static_cast<int>(i));
      bb.push_back(static_cast<int>(j));
      batch += l;
    } else {
      ac.push_back(static_cast<int>(i));
      bc.push_back(static_cast<int>(j));
    }
  }
  for (char l : b.labels) {
    if (a.labels.find(l) == std::string::npos) bf += l;
  }
  return Term{dot_general(a.x, b.x, ac, bc, ab, bb), batch + af + bf};
}

}  // namespace

Array einsum(std::string_view spec_in, std::vector<Array> operands) {
  std::string spec;
  for (char c : spec_in) {
    if (c != ' ') spec += c;
  }
  detail::check(spec.find("...") == std::string::npos, "einsum",
                "ellipsis is not supported in '{}'; name the dimensions", spec_in);
  size_t arrow = spec.find("->");
  std::string lhs = spec.substr(0, arrow);
  std::vector<std::string> ins;
  size_t start = 0;
  while (true) {
    size_t comma = lhs.find(',', start);
    ins.push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  detail::check(ins.size() == operands.size(), "einsum", "'{}' names {} operands but {} were given",
                spec_in, ins.size(), operands.size());
  std::map<char, int64_t> size;
  std::map<char, size_t> first;  // the operand where a label first appears
  std::map<char, int> count;
  for (size_t k = 0; k < ins.size(); ++k) {
    const std::string& s = ins[k];
    if (!(static_cast<int>(s.size()) == operands[k].ndim())) {
      detail::fail("einsum", "operand {} ({}{}) has rank {} but '{}' names {} dimensions in '{}'",
                   k, dtype_name(operands[k].dtype()), shape_to_string(operands[k].shape()),
                   operands[k].ndim(), s, s.size(), spec_in);
    }
    std::set<char> seen;
    for (size_t d = 0; d < s.size(); ++d) {
      char l = s[d];
      detail::check(std::isalpha(static_cast<unsigned char>(l)), "einsum",
                    "invalid label '{}' in '{}'", l, spec_in);
      detail::check(seen.insert(l).second, "einsum",
                    "label '{}' repeats within operand {} of '{}' (diagonals are not supported)", l,
                    k, spec_in);
      int64_t n = operands[k].shape()[d];
      auto it = size.find(l);
      if (it != size.end() && it->second != n) {
        size_t f = first[l];
        detail::fail("einsum",
                     "label '{}' has size {} in operand {} ({}) but {} in operand {} ({}) of '{}'",
                     l, it->second, f, shape_to_string(operands[f].shape()), n, k,
                     shape_to_string(operands[k].shape()), spec_in);
      }
      if (it == size.end()) first[l] = k;
      size[l] = n;
      count[l]++;
    }
  }
  std::string out;
  if (arrow == std::string::npos) {
    for (auto& [l, c] : count) {
      if (c == 1) out += l;
    }
  } else {
    out = spec.substr(arrow + 2);
    std::set<char> seen;
    for (char l : out) {
      detail::check(size.count(l) != 0, "einsum", "output label '{}' of '{}' is not in any operand",
                    l, spec_in);
      detail::check(seen.insert(l).second, "einsum", "output label '{}' repeats in '{}'", l, spec_in);
    }
  }
  std::vector<Term> terms;
  for (size_t k = 0; k < ins.size(); ++k) terms.push_back(Term{operands[k], ins[k]});
  auto labels_needed = [&](size_t skip_a, size_t skip_b) {
    std::string s = out;
    for (size_t k = 0; k < terms.size(); ++k) {
      if (k != skip_a && k != skip_b) s += terms[k].labels;
    }
    return s;
  };
  for (size_t k = 0; k < terms.size(); ++k) terms[k] = sum_private(terms[k], labels_needed(k, k));
  // Greedy: contract the pair with the smallest result first.
  while (terms.size() > 1) {
    size_t bi = 0, bj = 1;
    double best = -1;
    for (size_t i = 0; i < terms.size(); ++i) {
      for (size_t j = i + 1; j < terms.size(); ++j) {
        std::string later = labels_needed(i, j);
        double n = 1;
        std::set<char> res;
        for (char l : terms[i].labels + terms[j].labels) {
          bool shared = terms[i].labels.find(l) != std::string::npos &&
                        terms[j].labels.find(l) != std::string::npos;
          if ((!shared || later.find(l) != std::string::npos) && res.insert(l).second) {
            n *= static_cast<double>(size[l]);
          }
        }
        if (best < 0 || n < best) {
          best = n;
          bi = i;
          bj = j;
        }
      }
    }
    Term c = contract(terms[bi], terms[bj], labels_needed(bi, bj));
    terms.erase(terms.begin() + static_cast<long>(bj));
    terms[bi] = sum_private(c, labels_needed(bi, bi));
  }
  Term t = sum_private(terms[0], out);
  std::vector<int> perm;
  for (char l : out) perm.push_back(static_cast<int>(t.labels.find(l)));
  return transpose(t.x, perm);
}

}  // namespace partix

namespace partix {

Array matmul(const Array& a, const Array& b, OutSharding out) {
  return detail::with_out_sharding("matmul", {a, b}, out, [&] { return matmul(a, b); });
}

Array einsum(std::string_view spec, std::vector<Array> operands, OutSharding out) {
  return detail::with_out_sharding("einsum", operands, out,
                                   [&] { return einsum(spec, operands); });
}

Array dot_general(const Array& a, const Array& b, std::vector<int> a_contract,
                  std::vector<int> b_contract, std::vector<int> a_batch, std::vector<int> b_batch,
                  std::optional<DType> out_dtype, OutSharding out) {
  return detail::with_out_sharding("dot_general", {a, b}, out, [&] {
    return dot_general(a, b, a_contract, b_contract, a_batch, b_batch, out_dtype);
  });
}

}  // namespace partix
