// A small deterministic random generator (xoshiro256** seeded by splitmix64): the same seed
// gives the same numbers on every machine and compiler, unlike std::normal_distribution.
#pragma once
#include <cmath>
#include <cstdint>

namespace gpt {

class Rng {
  public:
    explicit Rng(uint64_t seed) {
        for (auto& s : state_) {
            seed += 0x9E3779B97F4A7C15ull;
            uint64_t z = seed;
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            s = z ^ (z >> 31);
        }
    }
    uint64_t next_u64() {
        const uint64_t result = rotl(state_[1] * 5, 7) * 9;
        const uint64_t t = state_[1] << 17;
        state_[2] ^= state_[0];
        state_[3] ^= state_[1];
        state_[1] ^= state_[2];
        state_[0] ^= state_[3];
        state_[2] ^= t;
        state_[3] = rotl(state_[3], 45);
        return result;
    }
    // Uniform in [0, 1) with 53 random bits.
    double uniform() { return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0); }
    float uniform(float lo, float hi) { return lo + static_cast<float>(uniform()) * (hi - lo); }
    // Uniform integer in [0, n).
    uint64_t below(uint64_t n) { return next_u64() % n; }
    // Standard normal (Box-Muller, one value per call).
    double normal() {
        const double u1 = 1.0 - uniform();  // (0, 1]: log stays finite
        const double u2 = uniform();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }

    // The whole state, to save in a checkpoint and continue the same sequence after a resume.
    void get_state(uint64_t out[4]) const {
        for (int i = 0; i < 4; ++i) out[i] = state_[i];
    }
    void set_state(const uint64_t in[4]) {
        for (int i = 0; i < 4; ++i) state_[i] = in[i];
    }

  private:
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    uint64_t state_[4];
};

}  // namespace gpt
