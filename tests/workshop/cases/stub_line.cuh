// A constant whose value is the exercise: the STUB lines replace it, so the stub compiles
// where EXERCISE_NOT_WRITTEN could not (a constexpr at namespace scope).
#pragma once

namespace sample {

// EXERCISE BEGIN stage00.magic_number TESTS Constants.Magic
constexpr int kMagic = 20240520;
constexpr int kVersion = 1;
// EXERCISE STUB constexpr int kMagic = 0;  // TODO: the shard header's magic number
// EXERCISE STUB constexpr int kVersion = 0;
// EXERCISE END

}  // namespace sample
