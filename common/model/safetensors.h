// Hugging Face safetensors files (docs/formats.md, "Hugging Face safetensors"), and GPT-2 in the
// layout of transformers' GPT2LMHeadModel, both ways: --init starts from GPT-2's released
// model.safetensors, and gpt_safetensors writes a directory that transformers loads.
//
// A safetensors file is an 8-byte little-endian header length N, N bytes of JSON (an object:
// tensor name -> {"dtype", "shape", "data_offsets": [begin, end]}, and an optional
// "__metadata__" of strings), then the tensors' raw little-endian bytes, the offsets counted
// from the end of the header. The reader treats every file as hostile: it checks the header
// against the file's size before reading it, and every tensor's offsets and shape against its
// dtype and the data, so that no number in a file makes it allocate more than the file holds.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/config.h"

namespace gpt {

// The longest header read, and the most JSON values in it: GPT-2 XL's header is under 100 KB and
// holds about 6,000 values (with its causal-mask buffers). The second bound keeps the parsed
// header small (a value costs about 150 bytes of memory, for two bytes of text).
constexpr uint64_t kSafetensorsMaxHeaderBytes = uint64_t(8) << 20;
constexpr size_t kSafetensorsMaxHeaderValues = size_t(1) << 16;

// One tensor as the header describes it.
struct SafetensorsTensor {
    std::string name;
    std::string dtype;            // as written: "F32", "F16", "BF16", "I64", ...
    std::vector<uint64_t> shape;  // empty for a scalar
    uint64_t begin = 0, end = 0;  // byte offsets in the data section
    uint64_t elements() const;
};

// A file's header, checked against the file (read_safetensors_header).
struct SafetensorsFile {
    std::string path;
    uint64_t data_start = 0;                      // 8 + N: where the data section begins
    std::vector<SafetensorsTensor> tensors;       // by their begin offset
    std::map<std::string, std::string> metadata;  // "__metadata__", if any

    const SafetensorsTensor* find(const std::string& name) const;  // nullptr if absent

    std::map<std::string, size_t> index;  // name -> position in `tensors`
};

// Whether the first `n` bytes of a file begin as a safetensors file does: 8 bytes of header
// length, then the JSON's '{' (after spaces, which the safetensors library allows).
bool looks_like_safetensors(const unsigned char* head, size_t n);

// Reads and checks the header of PATH: the length against the file and against
// kSafetensorsMaxHeaderBytes, UTF-8 and JSON (nesting, size), each entry's fields, a known
// dtype, a shape whose bytes are its offsets' span, offsets in order, within the data, not
// overlapping and covering it without a hole. Throws gpt::Error, one line naming PATH and the
// rule broken.
SafetensorsFile read_safetensors_header(const std::string& path);

// The elements of `tensor` as fp32, in its stored (row-major) order: F32, F16 and BF16 widen
// exactly; any other dtype is an error naming the tensor.
std::vector<float> read_safetensors_floats(const SafetensorsFile& file, const SafetensorsTensor& tensor);

// One tensor to write: fp32 values, stored as F32 or BF16 (rounded to nearest even).
struct SafetensorsOutput {
    std::string name;
    std::vector<uint64_t> shape;    // as stored
    const float* values = nullptr;  // the shape's product of them
    // 2-D only: `values` holds the transpose (shape[1] rows of shape[0]), and is written
    // transposed, one tensor at a time (Conv1D weights, without a copy of the whole model).
    bool transposed = false;
};

// Writes the tensors in the order given, the header padded with spaces to a multiple of 8 bytes
// (as the safetensors library does) and holding `metadata`. Atomic and interruptible, like
// save_checkpoint. `bf16`: each value rounded to the nearest bf16, ties to even.
void save_safetensors(const std::string& path, const std::vector<SafetensorsOutput>& tensors,
                      const std::map<std::string, std::string>& metadata, bool bf16);

// ----- GPT-2 in the Hugging Face layout -----

// The file a path names: PATH itself, or PATH/model.safetensors when PATH is a directory.
std::string hf_model_file(const std::string& path);

// GPT-2 read from a model.safetensors (GPT2LMHeadModel or GPT2Model keys, with or without the
// "transformer." prefix), with the config.json beside it if there is one, else the sizes from
// the tensors' shapes (n_head = C / 64, GPT-2's head size). Conv1D weights, stored (in, out),
// are transposed into this project's (out, in); F32, F16 and BF16 are read. The causal-mask
// buffers (h.N.attn.bias, h.N.attn.masked_bias) and any unknown key are ignored, and
// lm_head.weight must equal wte.weight (tied). A missing key is an error naming it.
struct HfImport {
    Checkpoint checkpoint;           // the parameters, step 0, no optimizer or run state
    std::vector<std::string> notes;  // what was loaded and what was ignored, one line each
};
HfImport load_hf_gpt2(const std::string& path);

enum class HfDtype { kF32, kBF16 };

// Writes DIR (created if missing) as transformers' from_pretrained reads it: model.safetensors
// ("transformer."-prefixed GPT2LMHeadModel keys, no lm_head.weight: it is tied to wte),
// config.json and generation_config.json; and, when tokenizer_dir is not empty, the GPT-2
// tokenizer's vocab.json and merges.txt (copies of its encoder.json and vocab.bpe, which must
// hold V tokens) and a tokenizer_config.json. Each file is replaced whole or not at all. The
// files written, by name, go to `written` if given.
void save_hf_gpt2(const std::string& dir, const GPTConfig& config, const std::vector<float>& params, HfDtype dtype,
                  const std::string& tokenizer_dir, std::vector<std::string>* written = nullptr);

}  // namespace gpt
