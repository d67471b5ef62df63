// max_pool3d.h - MaxPool3d now lives with the other pooling layers in nn/pooling.h.
#pragma once
#include "nn/pooling.h"
