// Text generation from a trained model, without training: `train --init CKPT --prompt TEXT`.
// The continuation goes to stdout as it is generated; what was loaded, and the speed, go to
// stderr, so that `> out.txt` keeps only the text.
#pragma once
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "dist/group.h"
#include "model/checkpoint.h"
#include "model/llmc.h"
#include "model/params.h"
#include "train/gpt.h"
#include "train/memory.h"
#include "train/options.h"
#include "train/policy.h"
#include "train/processes.h"
#include "train/sampler.h"
#include "util/error.h"
#include "util/file.h"
#include "util/rng.h"

namespace gpt {

// The length of the longest prefix of s that ends on a whole UTF-8 character (a token may end
// inside one: the rest is printed with the next token).
inline size_t complete_utf8_prefix(const std::string& s) {
    size_t end = s.size();
    for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
        const unsigned char c = s[s.size() - back];
        if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
        const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
        if (len > back) end = s.size() - back;  // the last character is not complete yet
        break;
    }
    return end;
}

template <class S>
int generate_text(const TrainOptions& opt) {
    // One process continues one text: N copies under a launcher would only print it N times.
    const dist::Launch launch = dist::launch_from_environment();
    if (launch.world > 1)
        throw Error("--prompt continues a text in one process, but the launcher's environment (" + launch.launcher +
                    ") says this is rank " + std::to_string(launch.rank) + " of " + std::to_string(launch.world) +
                    ": run it without a launcher");
    const auto parallel = join_the_run<S>(ParallelSettings{});  // this process's GPU, before any CUDA object
    const std::string path = !opt.init.empty() ? opt.init : opt.resume;
    if (path.empty())
        throw Error("--prompt continues a text with trained weights: give --init PATH, a checkpoint written with "
                    "--save, an llm.c model file such as gpt2_124M.bin, or a Hugging Face GPT-2's model.safetensors or its "
                    "directory (docs/formats.md)");
    std::vector<std::string> notes;  // what was read, for the banner
    const Checkpoint start = load_model_file(path, &notes);
    const GPTConfig& config = start.config;
    Tokenizer tokenizer = [&] {
        try {
            return Tokenizer::load(opt.tokenizer_dir);
        } catch (const MissingFile& e) {
            throw Error(std::string(e.what()) + "; the GPT-2 tokenizer is installed with the default corpus "
                        "(cmake --build build/cpu --target data), or give --tokenizer DIR");
        }
    }();
    std::vector<int> prompt = tokenizer.encode(opt.prompt);
    prompt.insert(prompt.begin(), Tokenizer::kEndOfText);  // as every document of the training data starts

    // One sequence as long as the model's context: the key/value cache lives in its activations.
    const int T = config.max_seq_len;
    check_memory<S>(config, 1, T, 1, parallel.get());
    GPT<S> model(config, 1, T, 1, parallel.get());
    model.set_parameters(start.params);
    std::fprintf(stderr, "stage      %s on %s\n", S::name, S::device_description().c_str());
    std::fprintf(stderr, "model      %s from %s\n", config.describe().c_str(), path.c_str());
    for (const std::string& note : notes) std::fprintf(stderr, "init       %s\n", note.c_str());
    std::fprintf(stderr, "sampling   %d tokens after a prompt of %zu tokens, temperature %g, top-k %d, seed %llu%s\n",
                 opt.sample_tokens, prompt.size() - 1, opt.temperature, opt.top_k,
                 static_cast<unsigned long long>(opt.seed),
                 int(prompt.size()) > T ? ("; the prompt keeps its last " + std::to_string(T) + " tokens").c_str() : "");
    std::fflush(stderr);

    std::printf("%s", opt.prompt.c_str());
    std::fflush(stdout);
    size_t printed = 0;  // bytes of the continuation printed so far
    Rng rng(opt.seed + 1);
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int> tokens =
        generate_tokens(model, prompt, opt.sample_tokens, opt.temperature, opt.top_k, rng,
                        [&](const std::vector<int>& so_far) {
                            const std::string text = tokenizer.decode(so_far);
                            const size_t end = complete_utf8_prefix(text);
                            if (end > printed) {
                                std::printf("%s", sanitize_utf8(text.substr(printed, end - printed)).c_str());
                                std::fflush(stdout);
                                printed = end;
                            }
                        });
    const std::string text = tokenizer.decode(tokens);
    if (text.size() > printed) std::printf("%s", sanitize_utf8(text.substr(printed)).c_str());
    std::printf("\n");
    std::fflush(stdout);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "generated  %zu tokens in %.2f s (%.0f tokens/s)%s\n", tokens.size(), seconds,
                 seconds > 0 ? tokens.size() / seconds : 0.0,
                 int(tokens.size()) < opt.sample_tokens ? ", stopped at <|endoftext|>" : "");
    return 0;
}

}  // namespace gpt
