// nn.h - every halfgrad::nn layer, the U-Net and checkpointing, in one include.
#pragma once
#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/checkpoint.h"
#include "nn/containers.h"
#include "nn/conv3d.h"
#include "nn/init.h"
#include "nn/instance_norm.h"
#include "nn/module.h"
#include "nn/pooling.h"
#include "nn/unet3d.h"
#include "nn/upsample.h"
