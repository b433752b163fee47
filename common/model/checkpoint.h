// Checkpoint files (docs/formats.md): config, step, parameters, optionally AdamW state, and the
// state a run needs to continue exactly where it stopped.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"

namespace gpt {

constexpr int kCheckpointMagic = 20261122;
constexpr int kCheckpointVersion = 3;  // 2 is still read: it carries no options (RunState::options)

// Everything besides the weights that decides what the next step computes: the settings that
// shape the run, where the data loader stands, and the sampling generator's state. Saved by the
// trainers; gpt_init's files have none (`recorded` false).
struct RunState {
    bool recorded = false;
    int batch = 0, seq = 0, micro_batches = 0, world = 0;
    int steps = 0, warmup = 0;  // the schedule: total steps of the run, linear warmup
    float lr = 0, min_lr_frac = 0;
    float weight_decay = 0, beta1 = 0, beta2 = 0, eps = 0, grad_clip = 0;
    uint64_t seed = 0;
    int64_t data_tokens = 0;            // train tokens in the data set, to recognise it again
    int64_t data_shard = 0, data_pos = 0;  // the loader's next window
    uint64_t sample_rng[4] = {};        // the sampling generator's state
    // The trainer's options that make the run what it is, as ("--steps", "40") pairs, so that
    // --resume alone continues it (train/options.h: carried_options). Empty in version 2.
    std::vector<std::pair<std::string, std::string>> options;
};

struct Checkpoint {
    GPTConfig config;
    int step = 0;               // training steps taken
    std::vector<float> params;  // file layout (unpadded vocabulary)
    std::vector<float> m, v;    // AdamW moments, empty when not saved
    RunState run;
};

// Writes PATH.tmp, flushes it to the disk, then renames it over PATH: a crash, a full disk or
// SIGINT/SIGTERM during the save leaves the previous PATH as it was and no PATH.tmp behind.
// Refuses parameters or moments that are not finite. Throws gpt::Error naming the file.
void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);

// Verifies every rule of the format (magic, version, config, reserved words, size, checksum of
// header and payload, finite values); throws gpt::Error naming the file and the rule broken.
Checkpoint load_checkpoint(const std::string& path);

// The header and run state only, without reading the weights (a run's options before the run is
// set up); the whole file is checked when load_checkpoint() reads it.
Checkpoint load_checkpoint_header(const std::string& path);

// The size of the file save_checkpoint() writes (the free-space check before a run).
uint64_t checkpoint_file_bytes(const GPTConfig& config, bool optimizer_state, const RunState& run);

// For tests: called after each chunk a save writes (a test raises SIGINT there).
std::function<void()>& checkpoint_save_progress_hook();

}  // namespace gpt
