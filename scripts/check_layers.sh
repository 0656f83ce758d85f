#!/usr/bin/env bash
# Checks the architecture the build declares (src/CMakeLists.txt, ARCHITECTURE.md "Layers"):
#  1. every folder of src/ is a declared layer, and each layer depends only on layers declared
#     before it (so the graph is acyclic);
#  2. a file includes only its own layer's headers and those of the layers it declares;
#  3. no code outside src/prim compares an op's name with a primitive's name: the compiler,
#     runtime and autodiff ask the primitive (its facts), they do not switch on names;
#  4. the Python package (python/partix) imports in one direction: no module imports another
#     that imports it back (directly or through others), and no import sits inside a function;
#  5. functions of one screen: none in src/ or python/src runs past 150 lines (split it into
#     named steps);
#  6. layers hold at link time too: a layer's compiled objects (read with nm) need only symbols
#     that it or the layers it declares (directly or through others) define. The upward edges
#     still to be removed are listed below (UPWARD_DEBT); one that appears anew fails, and so
#     does a listed one that has gone (remove it from the list).
# Usage: check_layers.sh [--objects DIR], DIR the build's src/CMakeFiles (default
# build/src/CMakeFiles; without objects rule 6 is skipped, saying so). Exits 1 naming each
# violation. Run by the test suite (ctest: layers.check), which passes its build's objects.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 - "$@" <<'PY'
import os, re, sys

errors = []
args = sys.argv[1:]
objects_dir, objects_given = 'build/src/CMakeFiles', False
if args[:1] == ['--objects'] and len(args) == 2:
    objects_dir, objects_given = args[1], True
elif args:
    sys.exit('usage: check_layers.sh [--objects BUILD/src/CMakeFiles]')
layers, deps = [], {}
decl = re.compile(r'^\s*partix_layer\((\w+)(?:\s+DEPENDS\s+([\w\s]+?))?\)', re.M)
for m in decl.finditer(open('src/CMakeLists.txt').read()):
    name, ds = m.group(1), (m.group(2) or '').split()
    for d in ds:
        if d not in deps:
            errors.append(f'src/CMakeLists.txt: layer {name} depends on {d}, which is not declared before it')
    layers.append(name)
    deps[name] = set(ds)

folders = sorted(d for d in os.listdir('src') if os.path.isdir(os.path.join('src', d)))
for f in folders:
    if f not in deps:
        errors.append(f'src/{f}: a folder that is not a declared layer (partix_layer in src/CMakeLists.txt)')

inc = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/', re.M)
def sources(root):
    for dp, _, fns in os.walk(root):
        for fn in sorted(fns):
            if fn.endswith(('.h', '.cpp', '.inc')):
                yield os.path.join(dp, fn)

for layer in layers:
    for path in sources(os.path.join('src', layer)):
        text = open(path, encoding='utf-8').read()
        for m in inc.finditer(text):
            target = m.group(1)
            if target == layer or target == 'partix' or target not in deps:
                continue
            if target not in deps[layer]:
                line = text.count('\n', 0, m.start()) + 1
                errors.append(f'{path}:{line}: layer {layer} includes {target}/, which it does not declare')

# Primitive names: each primitive's name() and the elementwise table's rows (the table is
# in ir, where the public ops read it too).
names = set()
for path in list(sources('src/prim')) + ['src/ir/elementwise_table.inc']:
    text = open(path, encoding='utf-8').read()
    for body in re.findall(r'name\(\)\s*const\s*(?:override\s*)?\{([^}]*)\}', text):
        names.update(re.findall(r'"([a-z_0-9]+)"', body))
    names.update(re.findall(r'PARTIX_(?:UNARY|BINARY|ELEMENTWISE)\w*\(\s*\w+\s*,\s*"([a-z_0-9]+)"', text))
if len(names) < 40:
    errors.append(f'check_layers: found only {len(names)} primitive names in src/prim; the patterns are stale')
alt = '|'.join(sorted(names, key=len, reverse=True))
compare = re.compile(r'(?:==|!=)\s*"(%s)"|"(%s)"\s*(?:==|!=)' % (alt, alt))
# A braced list of string literals (one line or several) holding two or more primitive names.
literal_list = re.compile(r'\{\s*"[a-z_0-9]+"(?:\s*,\s*"[a-z_0-9]+")+\s*,?\s*\}')
# The layers that see programs, plus the Python bindings and the CLI.
program_layers = [l for l in layers if l not in ('core', 'files', 'sharding', 'comm', 'formats',
                                                 'tokenizer', 'data', 'checkpoint', 'prim')]
roots = [os.path.join('src', l) for l in program_layers] + ['python/src', 'tools']
for root in roots:
    if not os.path.isdir(root):
        continue
    for path in sources(root):
        lines = open(path, encoding='utf-8').read().split('\n')
        code_lines = [l.split('//')[0] for l in lines]
        for no, code in enumerate(code_lines, 1):
            for m in compare.finditer(code):
                op = next(g for g in m.groups() if g)
                errors.append(f'{path}:{no}: compares an op name with "{op}"; ask the primitive instead')
        code = '\n'.join(code_lines)
        for m in literal_list.finditer(code):
            ops = [o for o in re.findall(r'"([a-z_0-9]+)"', m.group(0)) if o in names]
            if len(ops) >= 2:
                no = code.count('\n', 0, m.start()) + 1
                errors.append(f'{path}:{no}: a set of op names ({", ".join(ops)}); ask the primitive instead')

# The Python package: modules and the partix modules each imports; a cycle or an import
# inside a function is a violation (partix._core, the extension, is a leaf).
import ast
py_root = 'python'
modules = {}
for dp, _, fns in os.walk(os.path.join(py_root, 'partix')):
    for fn in sorted(fns):
        if fn.endswith('.py'):
            path = os.path.join(dp, fn)
            name = os.path.relpath(path, py_root)[:-3].replace(os.sep, '.')
            modules[name[:-len('.__init__')] if name.endswith('.__init__') else name] = path
modules['partix._core'] = None  # the extension module, built from python/src: a leaf
py_edges = {m: set() for m in modules}
for mod, path in modules.items():
    if path is None:
        continue
    tree = ast.parse(open(path, encoding='utf-8').read(), path)
    package = mod if path.endswith('__init__.py') else mod.rpartition('.')[0]
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    errors.append(f'{path}:{node.lineno}: an import inside a function; import at '
                                  'the top of the module (a cycle is fixed by moving code down)')
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                parts = package.split('.')
                base = '.'.join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            # `from P import m` imports module P.m when there is one, else a name of P.
            targets = [f'{base}.{a.name}' if f'{base}.{a.name}' in modules else base
                       for a in node.names]
        for t in targets:
            if t in modules and t != mod:
                py_edges[mod].add(t)
# Cycles: a module that reaches itself.
def reaches(start):
    seen, todo = set(), [start]
    while todo:
        for w in py_edges[todo.pop()]:
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen
for mod in sorted(modules):
    back = sorted(w for w in py_edges[mod] if mod in reaches(w))
    if back:
        errors.append(f'{modules[mod]}: {mod} imports {", ".join(back)}, which import(s) it back '
                      '(an import cycle)')

# Function bodies: a line that ends a function header with '{', to its matching brace.
MAX_FUNCTION_LINES = 150
header = re.compile(r'^\s*(?!(?:if|for|while|switch|else|do|try|catch|namespace|class|struct|'
                    r'enum|union|return)\b)[^;=]*\)\s*(?:const\s*)?(?:noexcept\s*)?'
                    r'(?:override\s*)?(?:final\s*)?(?:->\s*[^{]+)?\{\s*$')
longest = 0
for root in ('src', 'python/src'):
    for path in sources(root):
        lines = open(path, encoding='utf-8').read().split('\n')
        i = 0
        while i < len(lines):
            if not header.match(lines[i]) or lines[i].lstrip().startswith('//'):
                i += 1
                continue
            depth, j = 0, i
            for j in range(i, len(lines)):
                code = re.sub(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])*\'', '', lines[j]).split('//')[0]
                depth += code.count('{') - code.count('}')
                if depth <= 0:
                    break
            n = j - i + 1
            longest = max(longest, n)
            if n > MAX_FUNCTION_LINES:
                errors.append(f'{path}:{i + 1}: a function of {n} lines (at most '
                              f'{MAX_FUNCTION_LINES}); split it into named steps')
                i = j + 1
            else:
                i += 1

# Link time: which layer defines each symbol, and what each layer's objects need.
import subprocess
# Upward calls not yet inverted (ARCHITECTURE.md, "Layers at link time"): (from, to).
UPWARD_DEBT = set()  # (layer, later layer) pairs still to remove; none left
def closure(layer):
    seen, todo = set(), [layer]
    while todo:
        for d in deps.get(todo.pop(), ()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen
link_note = 'link check skipped (no objects: build first, or pass --objects)'
def layer_objects(layer):
    """The layer's objects whose sources still exist (a moved file leaves a stale object)."""
    root = os.path.join(objects_dir, f'partix_{layer}.dir')
    found = []
    for dp, _, fns in os.walk(root):
        for f in fns:
            path = os.path.join(dp, f)
            if f.endswith('.o') and os.path.exists(os.path.join('src', os.path.relpath(path, root)[:-2])):
                found.append(path)
    return found
objs = {l: layer_objects(l) for l in layers}
if any(objs.values()):
    defined, needed = {}, {l: set() for l in layers}
    for l in layers:
        if not objs[l]:
            errors.append(f'{objects_dir}: no objects for layer {l}')
            continue
        out = subprocess.run(['nm', '-P', '--'] + objs[l], capture_output=True, text=True,
                             check=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) < 2 or line.endswith(':'):
                continue
            sym, kind = parts[0], parts[1]
            if kind == 'U':
                needed[l].add(sym)
            elif kind in 'TDBR':  # strong, global definitions (weak ones are inline copies)
                defined.setdefault(sym, l)
    edges = {}
    for l in layers:
        allowed = closure(l) | {l}
        for sym in needed[l]:
            owner = defined.get(sym)
            if owner is not None and owner not in allowed:
                edges.setdefault((l, owner), []).append(sym)
    order = {l: i for i, l in enumerate(layers)}
    for (a, b), syms in sorted(edges.items(), key=lambda e: (order[e[0][0]], order[e[0][1]])):
        if (a, b) in UPWARD_DEBT:
            continue
        kind = 'a layer declared after it' if order[b] > order[a] else 'a layer it does not declare'
        errors.append(f'src/{a}: its objects call {len(syms)} symbol(s) of {b}, {kind} '
                      f'(e.g. {sorted(syms)[0]}); declare it or move the code')
    for a, b in sorted(UPWARD_DEBT - set(edges)):
        errors.append(f'scripts/check_layers.sh: UPWARD_DEBT lists {a} -> {b}, which the objects '
                      'no longer show; remove it from the list')
    link_note = ('at link time no layer needs a symbol of a layer above it' if not edges else
                 f'at link time {len(edges)} upward edge(s) remain, all listed '
                 f'({", ".join(f"{a}->{b}" for a, b in sorted(UPWARD_DEBT))})')
elif objects_given:
    errors.append(f'{objects_dir}: no layer objects found')

for e in errors:
    print(e)
if errors:
    print(f'check_layers: {len(errors)} violation(s)')
    sys.exit(1)
print(f'check_layers: {len(layers)} layers, acyclic; includes follow the declared order; '
      f'no op-name compares outside src/prim ({len(names)} primitives); the Python package '
      f'({len(modules) - 1} modules) imports without cycles and only at module level; the '
      f'longest function has {longest} lines; {link_note}')
PY
