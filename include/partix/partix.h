// partix: SPMD array programming over a mesh of devices. The umbrella header.
#pragma once

#include "partix/array.h"
#include "partix/checkpoint.h"
#include "partix/control.h"
#include "partix/device.h"
#include "partix/dtype.h"
#include "partix/error.h"
#include "partix/io.h"
#include "partix/mesh.h"
#include "partix/nn.h"
#include "partix/optim.h"
#include "partix/profiler.h"
#include "partix/ops.h"
#include "partix/random.h"
#include "partix/sharding.h"
#include "partix/transforms.h"
#include "partix/tree.h"
