// ops.h - every op halfgrad has, in one include. The set a backend must provide is exactly the
// functions declared in these headers (see each header for the math, shapes and dtypes).
#pragma once
#include "ops/activation/activation.h"
#include "ops/activation/smooth.h"
#include "ops/conv/conv3d.h"
#include "ops/elementwise/elementwise.h"
#include "ops/elementwise/sqrt_clamp.h"
#include "ops/loss/loss.h"
#include "ops/matmul/matmul.h"
#include "ops/norm/norm.h"
#include "ops/pool/avg_pool3d.h"
#include "ops/pool/max_pool3d.h"
#include "ops/pool/upsample.h"
#include "ops/reduce/reduce.h"
#include "ops/shape/shape.h"
#include "ops/softmax/softmax.h"
