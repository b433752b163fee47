// `train` of the cpu preset: the shared main with the CPU reference policy.
#include "cpu/reference_stage.h"
#define GPT_STAGE gpt::CpuReference
#include "train/main.inl"
