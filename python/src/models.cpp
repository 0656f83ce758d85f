// The model library (partix.models), optimizers and checkpoints.
#include "bind.h"

namespace partix::python {

void bind_models(nb::module_& m) { (void)m; }

}  // namespace partix::python
