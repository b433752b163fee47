// A stage policy that must not compile: its matmuls are BF16 but its activations stay float.
// Never built; the test policy.precision_matches_activations (tests/cpu/CMakeLists.txt)
// compiles it and expects the error of Ops<S> (train/policy.h), naming this stage. With
// -DCONSISTENT the same stage keeps fp32 matmuls and must compile: the error is the check's, not
// a mistake elsewhere in this file.
#include "cpu/reference_stage.h"
#include "train/gpt.h"

namespace gpt {

struct StageWithBf16MatmulsOnFloatActivations : CpuReference {
    static constexpr const char* name = "bf16_matmuls_on_float";
#ifndef CONSISTENT
    static constexpr Precision kPrecision = Precision::BF16;  // act_t is still CpuReference's float
#endif
};

}  // namespace gpt

int main() {
    const auto need = gpt::GPT<gpt::StageWithBf16MatmulsOnFloatActivations>::memory_needed(gpt::GPTConfig{}, 1, 1);
    return need.buffers > 0 ? 0 : 1;
}
