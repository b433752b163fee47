// Learning rate: linear warmup, then cosine decay to a floor (docs/formats.md).
#pragma once
#include <algorithm>
#include <cmath>

namespace gpt {

inline float learning_rate(int step, int total_steps, int warmup, float max_lr, float min_lr_frac) {
    if (step < warmup) return max_lr * static_cast<float>(step + 1) / static_cast<float>(warmup);
    const float floor = max_lr * min_lr_frac;
    const float progress = static_cast<float>(step - warmup) / static_cast<float>(std::max(1, total_steps - warmup));
    return floor + 0.5f * (max_lr - floor) * (1.0f + std::cos(3.14159265358979f * std::min(1.0f, progress)));
}

}  // namespace gpt
