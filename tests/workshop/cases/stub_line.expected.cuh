// A constant whose value is the exercise: the STUB lines replace it, so the stub compiles
// where EXERCISE_NOT_WRITTEN could not (a constexpr at namespace scope).
#pragma once

namespace sample {

// EXERCISE BEGIN stage00.magic_number TESTS Constants.Magic
// Write exercise stage00.magic_number here, in place of the placeholder below.
// What to write, and hints: docs/00_fp32_baseline.md#exercise
// Test it: tests/workshop_check.sh stage00.magic_number
constexpr int kMagic = 0;  // TODO: the shard header's magic number
constexpr int kVersion = 0;
// EXERCISE END

}  // namespace sample
