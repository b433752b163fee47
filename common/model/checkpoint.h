// Checkpoint files (docs/formats.md): config, step, parameters and optionally AdamW state.
#pragma once
#include <string>
#include <vector>

#include "model/config.h"

namespace gpt {

constexpr int kCheckpointMagic = 20261122;
constexpr int kCheckpointVersion = 1;

struct Checkpoint {
    GPTConfig config;
    int step = 0;               // training steps taken
    std::vector<float> params;  // file layout (unpadded vocabulary)
    std::vector<float> m, v;    // AdamW moments, empty when not saved
};

// Writes PATH.tmp then renames it over PATH, so a crash never leaves a half-written file.
void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);

// Verifies magic, version, config, size and checksum; throws gpt::Error naming the file.
Checkpoint load_checkpoint(const std::string& path);

}  // namespace gpt
