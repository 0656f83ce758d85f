// The data loader's declarations are public (partix/data.h).
#pragma once

#include "partix/data.h"
