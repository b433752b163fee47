#include "model/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "data/tokenizer.h"
#include "model/params.h"
#include "util/bf16.h"
#include "util/error.h"
#include "util/file.h"
#include "util/json.h"

namespace fs = std::filesystem;

namespace gpt {

namespace {

// ----- the file format -----

// Bytes per element of safetensors' dtypes. Only F32, F16 and BF16 are read as values; the
// others are known so that a file holding them is still checked whole.
uint64_t dtype_bytes(const std::string& dtype) {
    static const std::pair<const char*, uint64_t> kDtypes[] = {
        {"BOOL", 1},        {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
        {"F8_E4M3FNUZ", 1}, {"F8_E5M2FNUZ", 1},     {"I16", 2},     {"U16", 2},     {"F16", 2},
        {"BF16", 2},        {"I32", 4}, {"U32", 4}, {"F32", 4},     {"I64", 8},     {"U64", 8},
        {"F64", 8},         {"C64", 8}};
    for (const auto& [name, bytes] : kDtypes)
        if (dtype == name) return bytes;
    return 0;
}

// A name from a file, fit for a one-line message: control characters as \xNN, at most 80 bytes.
std::string shown(const std::string& name) {
    size_t cut = std::min<size_t>(name.size(), 80);
    while (cut > 0 && cut < name.size() && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;
    std::string out;
    for (const char c : name.substr(0, cut)) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
            char code[8];
            std::snprintf(code, sizeof(code), "\\x%02x", static_cast<unsigned char>(c));
            out += code;
        } else {
            out += c;
        }
    }
    return "'" + out + (cut < name.size() ? "...'" : "'");
}

// At most 8 sizes: a shape comes from the file, and a message must stay one short line.
std::string shape_text(const std::vector<uint64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size() && i < 8; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + (shape.size() > 8 ? ", ... (" + std::to_string(shape.size()) + " sizes)]" : "]");
}

// A JSON number that counts something: whole, at least 0, at most 2^53 (beyond that a double
// no longer holds every integer).
bool whole_number(const Json& v, uint64_t* out) {
    if (v.kind != Json::Number || !(v.number >= 0) || v.number > 9007199254740992.0 ||
        v.number != std::floor(v.number))
        return false;
    *out = static_cast<uint64_t>(v.number);
    return true;
}

// An entry of the header: {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}.
SafetensorsTensor read_entry(const std::string& name, const Json& v, uint64_t data_bytes) {
    const std::string tensor = "tensor " + shown(name);
    if (v.kind != Json::Object) throw Error(tensor + " is described by something other than a JSON object");
    if (v.object_entries != v.object.size()) throw Error(tensor + " is described with a field twice");
    for (const char* field : {"dtype", "shape", "data_offsets"})
        if (!v.has(field)) throw Error(tensor + " has no \"" + field + "\"");
    SafetensorsTensor t;
    t.name = name;
    if (v["dtype"].kind != Json::String) throw Error(tensor + ": its dtype is not a string");
    t.dtype = v["dtype"].string;
    const uint64_t bytes = dtype_bytes(t.dtype);
    if (bytes == 0) throw Error(tensor + ": unknown dtype " + shown(t.dtype));

    const Json& shape = v["shape"];
    if (shape.kind != Json::Array) throw Error(tensor + ": its shape is not an array");
    for (const Json& d : shape.array) {
        uint64_t n = 0;
        if (!whole_number(d, &n)) throw Error(tensor + ": its shape holds something other than a size");
        t.shape.push_back(n);
    }
    const Json& offsets = v["data_offsets"];
    if (offsets.kind != Json::Array || offsets.array.size() != 2 || !whole_number(offsets.array[0], &t.begin) ||
        !whole_number(offsets.array[1], &t.end))
        throw Error(tensor + ": data_offsets is not a pair of byte offsets [begin, end]");
    const std::string span = " [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "]";
    if (t.begin > t.end) throw Error(tensor + ": data_offsets" + span + " are not in order (begin after end)");
    if (t.end > data_bytes)
        throw Error(tensor + ": data_offsets" + span + " run past the data, which holds " +
                    std::to_string(data_bytes) + " bytes");

    // The shape's bytes: 0 if any size is 0, else a product checked for overflow (one beyond
    // 64 bits is a mismatch however large it is).
    const uint64_t span_bytes = t.end - t.begin;
    const bool empty = std::find(t.shape.begin(), t.shape.end(), uint64_t(0)) != t.shape.end();
    uint64_t need = empty ? 0 : bytes;
    bool beyond = false;
    for (size_t i = 0; !empty && !beyond && i < t.shape.size(); ++i) {
        beyond = need > std::numeric_limits<uint64_t>::max() / t.shape[i];
        if (!beyond) need *= t.shape[i];
    }
    if (beyond || need != span_bytes)
        throw Error(tensor + ": shape " + shape_text(t.shape) + " of " + t.dtype + " needs " +
                    (beyond ? "more bytes than its" : std::to_string(need) + " bytes, its") + " data_offsets" + span +
                    " span " + std::to_string(span_bytes));
    return t;
}

}  // namespace

uint64_t SafetensorsTensor::elements() const {
    uint64_t n = 1;
    for (const uint64_t d : shape) n *= d;  // checked against the file by the reader
    return n;
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
    const auto it = index.find(name);
    return it == index.end() ? nullptr : &tensors[it->second];
}

bool looks_like_safetensors(const unsigned char* head, size_t n) {
    for (size_t i = 8; i < n; ++i) {
        if (head[i] == '{') return true;
        if (head[i] != ' ' && head[i] != '\t' && head[i] != '\n' && head[i] != '\r') return false;
    }
    return false;
}

SafetensorsFile read_safetensors_header(const std::string& path) {
    const std::string where = path + ": ";
    std::ifstream in = open_regular_file(path, "");
    std::error_code ec;
    const uintmax_t size = fs::file_size(path, ec);
    if (ec) throw Error(where + "cannot read its size (" + ec.message() + ")");
    if (size < 8)
        throw Error(where + "not a safetensors file (" + std::to_string(size) +
                    " bytes, shorter than the 8-byte header length)");
    unsigned char length_bytes[8];
    if (!in.read(reinterpret_cast<char*>(length_bytes), 8)) throw Error(where + "read error");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | length_bytes[i];  // little-endian, on any host

    // Both bounds before anything is allocated: the length is a number the file chose.
    const uint64_t after_length = size - 8;
    if (n > after_length)
        throw Error(where + "its header length " + std::to_string(n) + " runs past the end of the file (" +
                    std::to_string(after_length) + " bytes follow the length)");
    if (n > kSafetensorsMaxHeaderBytes)
        throw Error(where + "a header of " + std::to_string(n) + " bytes, more than the " +
                    std::to_string(kSafetensorsMaxHeaderBytes) + " this reader accepts (GPT-2's are under 100 KB)");
    std::string text(n, '\0');
    if (!in.read(text.data(), static_cast<std::streamsize>(n))) throw Error(where + "read error in the header");
    Json header;
    try {
        header = Json::parse(text, kSafetensorsMaxHeaderValues);
    } catch (const Error& e) {
        throw Error(where + "header: " + e.what());
    }
    if (header.kind != Json::Object) throw Error(where + "its header is not a JSON object");
    if (header.object_entries != header.object.size()) throw Error(where + "its header names a key twice");

    SafetensorsFile file;
    file.path = path;
    file.data_start = 8 + n;
    const uint64_t data_bytes = after_length - n;
    try {
        for (const auto& [name, value] : header.object) {
            if (name == "__metadata__") {
                if (value.kind == Json::Null) continue;  // as the safetensors library reads it: none
                if (value.kind != Json::Object) throw Error("__metadata__ is not a JSON object");
                if (value.object_entries != value.object.size()) throw Error("__metadata__ names a key twice");
                for (const auto& [key, text_value] : value.object) {
                    if (text_value.kind != Json::String)
                        throw Error("__metadata__ " + shown(key) + " is not a string");
                    file.metadata[key] = text_value.string;
                }
                continue;
            }
            file.tensors.push_back(read_entry(name, value, data_bytes));
        }
    } catch (const Error& e) {
        throw Error(where + e.what());
    }

    // The tensors, by offset, must tile the data: no overlap, no hole, nothing after the last.
    std::sort(file.tensors.begin(), file.tensors.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t at = 0;
    const SafetensorsTensor* previous = nullptr;
    for (const SafetensorsTensor& t : file.tensors) {
        const std::string span = " [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "]";
        if (t.begin < at)
            throw Error(where + "tensor " + shown(t.name) + " at" + span + " overlaps tensor " + shown(previous->name) +
                        " at [" + std::to_string(previous->begin) + ", " + std::to_string(previous->end) + "]");
        if (t.begin > at)
            throw Error(where + "bytes [" + std::to_string(at) + ", " + std::to_string(t.begin) +
                        ") of the data belong to no tensor (a hole before tensor " + shown(t.name) + ")");
        at = t.end;
        previous = &t;
    }
    if (at != data_bytes)
        throw Error(where + "the data holds " + std::to_string(data_bytes) + " bytes, its tensors end at byte " +
                    std::to_string(at) + ": " + std::to_string(data_bytes - at) + " trailing bytes belong to no tensor");
    for (size_t i = 0; i < file.tensors.size(); ++i) file.index[file.tensors[i].name] = i;
    return file;
}

std::vector<float> read_safetensors_floats(const SafetensorsFile& file, const SafetensorsTensor& tensor) {
    const std::string where = file.path + ": tensor " + shown(tensor.name) + ": ";
    const uint64_t bytes = dtype_bytes(tensor.dtype);
    if (tensor.dtype != "F32" && tensor.dtype != "F16" && tensor.dtype != "BF16")
        throw Error(where + "its dtype is " + tensor.dtype + "; this reader takes F32, F16 and BF16");
    std::ifstream in = open_regular_file(file.path, "");
    in.seekg(static_cast<std::streamoff>(file.data_start + tensor.begin));
    const uint64_t count = (tensor.end - tensor.begin) / bytes;  // the header was checked against the file
    std::vector<float> out(count);
    const bool is_bf16 = tensor.dtype == "BF16";
    // A chunk at a time, so that half-precision tensors need no second copy of their size.
    std::vector<unsigned char> chunk(std::min<uint64_t>(count * bytes, uint64_t(1) << 22));
    for (uint64_t done = 0; done < count;) {
        const uint64_t m = std::min<uint64_t>(count - done, chunk.size() / bytes);
        if (!in.read(reinterpret_cast<char*>(chunk.data()), static_cast<std::streamsize>(m * bytes)))
            throw Error(where + "read error (did the file change while it was read?)");
        for (uint64_t i = 0; i < m; ++i) {
            const unsigned char* b = chunk.data() + i * bytes;
            if (bytes == 4) {
                const uint32_t bits = uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24;
                std::memcpy(&out[done + i], &bits, 4);
            } else {
                const uint16_t half = static_cast<uint16_t>(b[0] | b[1] << 8);
                out[done + i] = is_bf16 ? bf16_bits_to_float(half) : f16_bits_to_float(half);
            }
        }
        done += m;
    }
    return out;
}

void save_safetensors(const std::string& path, const std::vector<SafetensorsOutput>& tensors,
                      const std::map<std::string, std::string>& metadata, bool bf16) {
    const uint64_t elem = bf16 ? 2 : 4;
    std::string header = "{";
    if (!metadata.empty()) {
        header += "\"__metadata__\":{";
        for (auto it = metadata.begin(); it != metadata.end(); ++it)
            header += (it == metadata.begin() ? "" : ",") + json_string(it->first) + ":" + json_string(it->second);
        header += "}";
    }
    uint64_t at = 0;
    for (const SafetensorsOutput& t : tensors) {
        if (t.transposed && t.shape.size() != 2)
            throw Error("safetensors " + path + ": tensor " + t.name + " is transposed but not 2-D");
        uint64_t n = 1;
        for (const uint64_t d : t.shape) n *= d;
        header += std::string(header.size() > 1 ? "," : "") + json_string(t.name) + ":{\"dtype\":\"" +
                  (bf16 ? "BF16" : "F32") + "\",\"shape\":" + shape_text(t.shape) + ",\"data_offsets\":[" +
                  std::to_string(at) + "," + std::to_string(at + n * elem) + "]}";
        at += n * elem;
    }
    header += "}";
    header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned

    InterruptibleFile file(path, "safetensors file");
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(uint64_t(header.size()) >> (8 * i));
    file.write(length, 8);
    file.write(header.data(), header.size());
    // Little-endian bytes, a chunk at a time (a transposed tensor is gathered into the chunk).
    std::vector<unsigned char> chunk(size_t(1) << 22);
    for (const SafetensorsOutput& t : tensors) {
        uint64_t n = 1;
        for (const uint64_t d : t.shape) n *= d;
        const uint64_t rows = t.transposed ? t.shape[0] : 0, cols = t.transposed ? t.shape[1] : 0;
        size_t filled = 0;
        for (uint64_t i = 0; i < n; ++i) {
            // Element (r, c) of the stored tensor is element (c, r) of the transposed values.
            const float x = t.transposed ? t.values[(i % cols) * rows + i / cols] : t.values[i];
            uint32_t bits;
            std::memcpy(&bits, &x, 4);
            if (bf16) bits = float_to_bf16_bits(x);
            for (uint64_t b = 0; b < elem; ++b) chunk[filled++] = static_cast<unsigned char>(bits >> (8 * b));
            if (filled == chunk.size()) file.write(chunk.data(), filled), filled = 0;
        }
        file.write(chunk.data(), filled);
    }
    file.commit();
}

// ----- GPT-2 in the Hugging Face layout -----

namespace {

constexpr int kGpt2HeadSize = 64;  // in every GPT-2 size: n_head = n_embd / 64

// The per-layer tensors, as transformers' GPT2Block names them. Conv1D weights are stored
// (in, out), the transpose of this project's (out, in).
struct LayerKey {
    ParamTensor tensor;
    const char* suffix;
    bool conv1d;
};
constexpr LayerKey kLayerKeys[] = {
    {kLn1W, "ln_1.weight", false},          {kLn1B, "ln_1.bias", false},
    {kQkvW, "attn.c_attn.weight", true},    {kQkvB, "attn.c_attn.bias", false},
    {kAttProjW, "attn.c_proj.weight", true}, {kAttProjB, "attn.c_proj.bias", false},
    {kLn2W, "ln_2.weight", false},          {kLn2B, "ln_2.bias", false},
    {kFcW, "mlp.c_fc.weight", true},        {kFcB, "mlp.c_fc.bias", false},
    {kFcProjW, "mlp.c_proj.weight", true},  {kFcProjB, "mlp.c_proj.bias", false},
};

// One layer's tensor in this project's orientation: rows x cols, or a vector (cols 0).
struct OurShape {
    uint64_t rows, cols;
};
OurShape our_shape(ParamTensor t, const GPTConfig& c) {
    const uint64_t C = c.n_embd;
    switch (t) {
        case kWte: return {uint64_t(c.vocab_size), C};
        case kWpe: return {uint64_t(c.max_seq_len), C};
        case kQkvW: return {3 * C, C};
        case kQkvB: return {3 * C, 0};
        case kAttProjW: return {C, C};
        case kFcW: return {4 * C, C};
        case kFcB: return {4 * C, 0};
        case kFcProjW: return {C, 4 * C};
        default: return {C, 0};  // LayerNorms and the C-wide biases
    }
}

// The shape a file stores: Conv1D weights transposed.
std::vector<uint64_t> stored_shape(ParamTensor t, const GPTConfig& c, bool conv1d) {
    const OurShape s = our_shape(t, c);
    if (s.cols == 0) return {s.rows};
    return conv1d ? std::vector<uint64_t>{s.cols, s.rows} : std::vector<uint64_t>{s.rows, s.cols};
}

std::string layer_key(int layer, const char* suffix) { return "h." + std::to_string(layer) + "." + suffix; }

// "h.12.attn.bias" -> 12, with `rest` "attn.bias"; -1 for a key outside the layers (or a layer
// number of more than kMaxDigits digits, which no model here has).
int layer_of(const std::string& key, std::string* rest) {
    constexpr size_t kMaxDigits = 6;
    if (key.compare(0, 2, "h.") != 0) return -1;
    size_t i = 2;
    int layer = 0;
    while (i < key.size() && i < 2 + kMaxDigits && key[i] >= '0' && key[i] <= '9') layer = layer * 10 + (key[i++] - '0');
    if (i == 2 || i >= key.size() || key[i] != '.') return -1;
    if (key[2] == '0' && i > 3) return -1;  // "h.01." is not transformers' spelling
    *rest = key.substr(i + 1);
    return layer;
}

// config.json's sizes, where there is one, checked against the shapes; and the settings under
// which transformers' GPT-2 would compute something else than this project's.
struct HfConfig {
    bool present = false;
    int n_layer = -1, n_head = -1;  // -1: not given
};
HfConfig read_hf_config(const std::string& path, const GPTConfig& shapes) {
    HfConfig c;
    std::error_code ec;
    // Only a path with nothing at all is "no config.json": a broken link or one that cannot be
    // looked at is an error (parse_file names it), not a reason to guess the sizes.
    if (fs::symlink_status(path, ec).type() == fs::file_type::not_found) return c;
    const Json j = Json::parse_file(path);
    const std::string where = path + ": ";
    if (j.kind != Json::Object) throw Error(where + "not a JSON object");
    c.present = true;
    auto whole = [&](const char* key, int* out) {
        if (!j.has(key) || j[key].kind == Json::Null) return false;
        uint64_t n = 0;
        if (!whole_number(j[key], &n) || n > uint64_t(std::numeric_limits<int>::max()))
            throw Error(where + "\"" + key + "\" is not a size");
        *out = static_cast<int>(n);
        return true;
    };
    auto same = [&](const char* key, int from_shapes, const char* tensor) {
        int n = 0;
        if (whole(key, &n) && n != from_shapes)
            throw Error(where + "\"" + key + "\" is " + std::to_string(n) + ", but " + tensor + " says " +
                        std::to_string(from_shapes));
    };
    same("vocab_size", shapes.vocab_size, "wte.weight's shape");
    same("n_embd", shapes.n_embd, "wte.weight's shape");
    same("n_positions", shapes.max_seq_len, "wpe.weight's shape");
    whole("n_layer", &c.n_layer);
    whole("n_head", &c.n_head);
    int inner = 0;
    const int64_t mlp = 4 * int64_t(shapes.n_embd);  // n_embd is not yet validated: in 64 bits
    if (whole("n_inner", &inner) && inner != mlp)
        throw Error(where + "\"n_inner\" is " + std::to_string(inner) + "; this project's GPT-2 has an MLP of 4 x n_embd = " +
                    std::to_string(mlp));
    auto text = [&](const char* key) { return j.has(key) && j[key].kind == Json::String ? j[key].string : ""; };
    if (j.has("model_type") && text("model_type") != "gpt2")
        throw Error(where + "\"model_type\" is " + shown(text("model_type")) + ", not \"gpt2\"");
    if (j.has("activation_function") && text("activation_function") != "gelu_new" &&
        text("activation_function") != "gelu_pytorch_tanh")
        throw Error(where + "\"activation_function\" is " + shown(text("activation_function")) +
                    "; this project's GPT-2 uses GELU's tanh approximation (\"gelu_new\")");
    if (j.has("layer_norm_epsilon") &&
        (j["layer_norm_epsilon"].kind != Json::Number || !(std::fabs(j["layer_norm_epsilon"].number - 1e-5) <= 1e-12)))
        throw Error(where + "\"layer_norm_epsilon\" is not 1e-05, the epsilon of this project's LayerNorm");
    auto flag = [&](const char* key, bool expected, const char* why) {
        if (j.has(key) && j[key].kind == Json::Bool && j[key].boolean != expected)
            throw Error(where + "\"" + key + "\" is " + (expected ? "false" : "true") + ": " + why);
    };
    flag("scale_attn_weights", true, "this project's attention always scales by 1/sqrt(head size)");
    flag("scale_attn_by_inverse_layer_idx", false, "this project's attention does not scale by layer");
    flag("add_cross_attention", false, "this project's GPT-2 has no cross-attention");
    flag("tie_word_embeddings", true, "this project's LM head is the token embedding (tied)");
    return c;
}

}  // namespace

std::string hf_model_file(const std::string& path) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) return (fs::path(path) / "model.safetensors").string();
    return path;
}

HfImport load_hf_gpt2(const std::string& path) {
    const std::string model_path = hf_model_file(path);
    std::error_code ec;
    if (model_path != path && !fs::exists(model_path, ec)) {
        const bool sharded = fs::exists(fs::path(path) / "model.safetensors.index.json", ec);
        throw Error(path + ": a directory without model.safetensors" +
                    (sharded ? std::string(" (a model in several shards, which this project does not read)")
                             : std::string(" (the Hugging Face layout; see docs/formats.md)")));
    }
    const SafetensorsFile file = read_safetensors_header(model_path);
    const std::string where = model_path + ": ";

    // The prefix: GPT2LMHeadModel writes "transformer.", GPT2Model and GPT-2's released file none.
    std::string prefix;
    if (file.find("transformer.wte.weight") || file.find("transformer.wpe.weight")) prefix = "transformer.";
    else if (!file.find("wte.weight") && !file.find("wpe.weight"))
        throw Error(where + "no key wte.weight or wpe.weight (with or without the prefix 'transformer.'): not a GPT-2 "
                            "in the Hugging Face layout");
    auto key = [&](const std::string& name) { return prefix + name; };
    auto tensor_of = [&](const std::string& name) -> const SafetensorsTensor& {
        const SafetensorsTensor* t = file.find(key(name));
        if (!t) throw Error(where + "missing key " + key(name));
        return *t;
    };

    // The token embedding is also the LM head (tied). safetensors' save_model keeps one name of a
    // tied pair, the first in sorted order: lm_head.weight, without wte.weight.
    const SafetensorsTensor* lm_head = file.find("lm_head.weight");
    const bool wte_is_lm_head = !file.find(key("wte.weight")) && lm_head;
    const SafetensorsTensor& wte = wte_is_lm_head ? *lm_head : tensor_of("wte.weight");
    if (wte_is_lm_head) lm_head = nullptr;

    // Sizes from the shapes; then config.json, where there is one, must agree with them.
    const SafetensorsTensor& wpe = tensor_of("wpe.weight");
    if (wte.shape.size() != 2 || wpe.shape.size() != 2)
        throw Error(where + "wte.weight and wpe.weight must be matrices; their shapes are " + shape_text(wte.shape) +
                    " and " + shape_text(wpe.shape));
    if (wte.shape[1] != wpe.shape[1])
        throw Error(where + "wte.weight " + shape_text(wte.shape) + " and wpe.weight " + shape_text(wpe.shape) +
                    " differ in width");
    const uint64_t kLargest = uint64_t(std::numeric_limits<int>::max());
    if (wte.shape[0] > kLargest || wte.shape[1] > kLargest || wpe.shape[0] > kLargest)
        throw Error(where + "wte.weight " + shape_text(wte.shape) + " or wpe.weight " + shape_text(wpe.shape) +
                    " is too large for a model");
    GPTConfig config;
    config.vocab_size = static_cast<int>(wte.shape[0]);
    config.n_embd = static_cast<int>(wte.shape[1]);
    config.max_seq_len = static_cast<int>(wpe.shape[0]);
    // Layers are counted by the keys of their tensors only: a stray key of a layer (a mask
    // buffer, something unknown) makes no layer.
    int layers_seen = 0;
    for (const SafetensorsTensor& t : file.tensors) {
        std::string rest;
        if (t.name.compare(0, prefix.size(), prefix) != 0) continue;
        const int layer = layer_of(t.name.substr(prefix.size()), &rest);
        for (const LayerKey& k : kLayerKeys)
            if (layer >= 0 && rest == k.suffix) layers_seen = std::max(layers_seen, layer + 1);
    }
    const std::string config_path = (fs::path(model_path).parent_path() / "config.json").string();
    const HfConfig hf = read_hf_config(config_path, config);
    HfImport result;
    if (hf.n_layer >= 0) {  // 0 too: validate_config names it
        if (layers_seen > hf.n_layer)
            throw Error(where + "holds layer " + std::to_string(layers_seen - 1) + " (" + key(layer_key(layers_seen - 1, "*")) +
                        "), but " + config_path + " says n_layer " + std::to_string(hf.n_layer));
        config.n_layer = hf.n_layer;
    } else {
        config.n_layer = std::max(1, layers_seen);  // none: the error below names h.0's first key
    }
    std::string sizes_from;
    if (hf.n_head >= 0) {
        config.n_head = hf.n_head;
        sizes_from = "sizes from the tensors' shapes and n_head " + std::to_string(hf.n_head) + " from " + config_path +
                     ", which agrees with them";
    } else {
        if (config.n_embd % kGpt2HeadSize != 0)
            throw Error(where + "n_embd " + std::to_string(config.n_embd) + " is not a multiple of GPT-2's head size " +
                        std::to_string(kGpt2HeadSize) + ", so the number of heads cannot be told from the shapes: put a "
                        "config.json with n_head beside it");
        config.n_head = config.n_embd / kGpt2HeadSize;
        sizes_from = (hf.present ? config_path + " has no n_head" : "no config.json beside it") +
                     std::string(": sizes from the tensors' shapes, n_head = n_embd / 64 = ") +
                     std::to_string(config.n_head) + " (GPT-2's head size)";
    }
    try {
        validate_config(config);
    } catch (const Error& e) {
        throw Error(where + e.what());
    }

    // Every tensor the model needs, of its shape and a dtype read as values; then the rest.
    std::set<std::string> used;
    std::set<std::string> dtypes;
    auto check_tensor = [&](const SafetensorsTensor& t, const std::vector<uint64_t>& shape) -> const SafetensorsTensor& {
        if (t.shape != shape)
            throw Error(where + t.name + " has shape " + shape_text(t.shape) + ", expected " + shape_text(shape) +
                        " for " + config.describe());
        if (t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16")
            throw Error(where + t.name + " is " + t.dtype + "; this reader takes F32, F16 and BF16");
        used.insert(t.name);
        dtypes.insert(t.dtype);
        return t;
    };
    auto check = [&](const std::string& name, const std::vector<uint64_t>& shape) -> const SafetensorsTensor& {
        return check_tensor(tensor_of(name), shape);
    };
    struct Planned {
        const SafetensorsTensor* tensor;
        ParamTensor ours;
        int layer;  // -1: not a per-layer tensor
        bool conv1d;
    };
    std::vector<Planned> plan;
    plan.push_back({&check_tensor(wte, stored_shape(kWte, config, false)), kWte, -1, false});
    plan.push_back({&check("wpe.weight", stored_shape(kWpe, config, false)), kWpe, -1, false});
    for (int l = 0; l < config.n_layer; ++l)
        for (const LayerKey& k : kLayerKeys)
            plan.push_back({&check(layer_key(l, k.suffix), stored_shape(k.tensor, config, k.conv1d)), k.tensor, l, k.conv1d});
    plan.push_back({&check("ln_f.weight", stored_shape(kLnfW, config, false)), kLnfW, -1, false});
    plan.push_back({&check("ln_f.bias", stored_shape(kLnfB, config, false)), kLnfB, -1, false});

    int masks = 0;
    std::vector<std::string> unknown;
    for (const SafetensorsTensor& t : file.tensors) {
        if (used.count(t.name)) continue;
        std::string rest;
        const bool prefixed = t.name.compare(0, prefix.size(), prefix) == 0;
        if (prefixed && layer_of(t.name.substr(prefix.size()), &rest) >= 0 &&
            (rest == "attn.bias" || rest == "attn.masked_bias"))
            ++masks;
        else if (&t != lm_head)
            unknown.push_back(t.name);
    }
    if (lm_head && lm_head->shape != wte.shape)
        throw Error(where + "lm_head.weight has shape " + shape_text(lm_head->shape) + ", wte.weight " +
                    shape_text(wte.shape) + ": this project's LM head is the token embedding (tied)");

    // Nothing was allocated before this point but the header: every size above was checked
    // against the file, so the parameters are at most twice its size (from 16-bit values).
    Checkpoint& c = result.checkpoint;
    c.config = config;
    const ParamLayout layout(config);
    c.params.resize(layout.total());
    for (const Planned& p : plan) {
        const std::vector<float> values = read_safetensors_floats(file, *p.tensor);
        for (size_t i = 0; i < values.size(); ++i)
            if (!std::isfinite(values[i]))
                throw Error(where + p.tensor->name + ": element " + std::to_string(i) + " is " +
                            (std::isnan(values[i]) ? "nan" : "inf"));
        const OurShape s = our_shape(p.ours, config);
        const size_t per_layer = s.cols == 0 ? s.rows : s.rows * s.cols;  // a layer's share of the stacked tensor
        float* dst = c.params.data() + layout.offset[p.ours] + (p.layer < 0 ? 0 : size_t(p.layer) * per_layer);
        if (!p.conv1d) {
            std::copy(values.begin(), values.end(), dst);
        } else {
            // Stored (in, out), that is (cols, rows) of ours, which is (out, in).
            for (uint64_t r = 0; r < s.rows; ++r)
                for (uint64_t col = 0; col < s.cols; ++col) dst[r * s.cols + col] = values[col * s.rows + r];
        }
    }
    if (lm_head) {  // a copy of wte (as transformers may write it): it must hold the same values
        const std::vector<float> values = read_safetensors_floats(file, *lm_head);
        const float* embedding = c.params.data() + layout.offset[kWte];
        for (size_t i = 0; i < values.size(); ++i)
            if (!(values[i] == embedding[i]))
                throw Error(where + "lm_head.weight differs from wte.weight (element " + std::to_string(i) +
                            "): this project's LM head is the token embedding (tied), as in GPT-2");
    }

    // What the banner says.
    std::string kinds;
    for (const std::string& d : dtypes) kinds += (kinds.empty() ? "" : " and ") + d;
    result.notes.push_back(model_path + ": GPT-2 in the Hugging Face layout (" +
                           (prefix.empty() ? std::string("GPT2Model keys") : "GPT2LMHeadModel keys, 'transformer.' prefix") +
                           "), " + std::to_string(plan.size()) + " tensors of " + kinds + " read");
    result.notes.push_back(sizes_from);
    if (masks > 0)
        result.notes.push_back("ignored " + std::to_string(masks) +
                               " causal-mask buffers (h.N.attn.bias, h.N.attn.masked_bias): the attention makes its own");
    if (lm_head) result.notes.push_back("ignored lm_head.weight: the same values as wte.weight (tied)");
    if (wte_is_lm_head)
        result.notes.push_back("wte.weight read from lm_head.weight: the file keeps one name of the tied pair");
    if (!unknown.empty()) {
        std::string names;
        for (size_t i = 0; i < unknown.size() && i < 3; ++i) names += (i ? ", " : "") + shown(unknown[i]);
        if (unknown.size() > 3) names += " and " + std::to_string(unknown.size() - 3) + " more";
        result.notes.push_back("ignored " + std::to_string(unknown.size()) + " unknown key" +
                               (unknown.size() > 1 ? "s" : "") + ": " + names);
    }
    return result;
}

namespace {

// config.json as transformers' GPT2Config writes it, for this project's model: no dropout (the
// trainers use none), the tanh GELU, LayerNorm eps 1e-5, tied embeddings.
std::string hf_config_json(const GPTConfig& c, HfDtype dtype) {
    // <|endoftext|> exists only in a vocabulary that holds GPT-2's tokens.
    const std::string eot = c.vocab_size > Tokenizer::kEndOfText ? std::to_string(Tokenizer::kEndOfText) : "null";
    return "{\n"
           "  \"activation_function\": \"gelu_new\",\n"
           "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
           "  \"attn_pdrop\": 0.0,\n"
           "  \"bos_token_id\": " + eot + ",\n"
           "  \"embd_pdrop\": 0.0,\n"
           "  \"eos_token_id\": " + eot + ",\n"
           "  \"initializer_range\": 0.02,\n"
           "  \"layer_norm_epsilon\": 1e-05,\n"
           "  \"model_type\": \"gpt2\",\n"
           "  \"n_ctx\": " + std::to_string(c.max_seq_len) + ",\n"
           "  \"n_embd\": " + std::to_string(c.n_embd) + ",\n"
           "  \"n_head\": " + std::to_string(c.n_head) + ",\n"
           "  \"n_inner\": null,\n"
           "  \"n_layer\": " + std::to_string(c.n_layer) + ",\n"
           "  \"n_positions\": " + std::to_string(c.max_seq_len) + ",\n"
           "  \"resid_pdrop\": 0.0,\n"
           "  \"scale_attn_weights\": true,\n"
           "  \"tie_word_embeddings\": true,\n"
           "  \"torch_dtype\": \"" + (dtype == HfDtype::kBF16 ? "bfloat16" : "float32") + "\",\n"
           "  \"use_cache\": true,\n"
           "  \"vocab_size\": " + std::to_string(c.vocab_size) + "\n"
           "}\n";
}

std::string hf_generation_config_json(const GPTConfig& c) {
    const std::string eot = c.vocab_size > Tokenizer::kEndOfText ? std::to_string(Tokenizer::kEndOfText) : "null";
    return "{\n  \"bos_token_id\": " + eot + ",\n  \"eos_token_id\": " + eot + "\n}\n";
}

std::string hf_tokenizer_config_json(const GPTConfig& c) {
    return "{\n"
           "  \"add_prefix_space\": false,\n"
           "  \"bos_token\": \"<|endoftext|>\",\n"
           "  \"eos_token\": \"<|endoftext|>\",\n"
           "  \"model_max_length\": " + std::to_string(c.max_seq_len) + ",\n"
           "  \"tokenizer_class\": \"GPT2Tokenizer\",\n"
           "  \"unk_token\": \"<|endoftext|>\"\n"
           "}\n";
}

void write_small_file(const std::string& path, const std::string& text) {
    ReplacingFile file(path, "file");
    file.write(text);
    file.commit();
}

}  // namespace

void save_hf_gpt2(const std::string& dir, const GPTConfig& config, const std::vector<float>& params, HfDtype dtype,
                  const std::string& tokenizer_dir, std::vector<std::string>* written) {
    const std::string where = "not writing the Hugging Face directory " + dir + ": ";
    try {
        validate_config(config);
    } catch (const Error& e) {
        throw Error(where + e.what());
    }
    const ParamLayout layout(config);
    if (params.size() != layout.total())
        throw Error(where + std::to_string(params.size()) + " parameters, its config has " +
                    std::to_string(layout.total()));
    if (const std::string bad = first_non_finite(params, config, "parameter"); !bad.empty()) throw Error(where + bad);
    if (dtype == HfDtype::kBF16)
        if (const std::string beyond = first_beyond_bf16(params, config, "parameter"); !beyond.empty())
            throw Error(where + beyond);

    // The tokenizer's files, read (and checked to load) before anything is written.
    std::string vocab, merges;
    if (!tokenizer_dir.empty()) {
        const Tokenizer tokenizer = Tokenizer::load(tokenizer_dir);
        if (tokenizer.vocab_size() != config.vocab_size)
            throw Error(where + "the tokenizer in " + tokenizer_dir + " has " + std::to_string(tokenizer.vocab_size()) +
                        " tokens, the model's vocabulary " + std::to_string(config.vocab_size) +
                        " (write no tokenizer files, or give the model's own tokenizer)");
        vocab = read_regular_file((fs::path(tokenizer_dir) / "encoder.json").string(), "", Json::kMaxBytes);
        merges = read_regular_file((fs::path(tokenizer_dir) / "vocab.bpe").string(), "", Json::kMaxBytes);
    }

    std::error_code ec;
    if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) throw Error(where + "it exists and is not a directory");
    fs::create_directories(dir, ec);
    if (ec) throw Error(where + "cannot create it (" + ec.message() + ")");
    const fs::path d(dir);
    std::vector<std::string> names = {"model.safetensors", "config.json", "generation_config.json"};
    if (!tokenizer_dir.empty()) names.insert(names.end(), {"vocab.json", "merges.txt", "tokenizer_config.json"});
    for (const std::string& name : names) require_writable_path((d / name).string(), "");

    // GPT2LMHeadModel's keys, layer by layer; lm_head.weight is left out, as transformers leaves
    // out a tied tensor, and is tied to wte when the model is loaded.
    std::vector<SafetensorsOutput> tensors;
    auto add = [&](const std::string& name, ParamTensor t, int layer, bool conv1d) {
        const OurShape s = our_shape(t, config);
        const size_t per_layer = s.cols == 0 ? s.rows : s.rows * s.cols;
        tensors.push_back({"transformer." + name, stored_shape(t, config, conv1d),
                           params.data() + layout.offset[t] + (layer < 0 ? 0 : size_t(layer) * per_layer), conv1d});
    };
    add("wte.weight", kWte, -1, false);
    add("wpe.weight", kWpe, -1, false);
    for (int l = 0; l < config.n_layer; ++l)
        for (const LayerKey& k : kLayerKeys) add(layer_key(l, k.suffix), k.tensor, l, k.conv1d);
    add("ln_f.weight", kLnfW, -1, false);
    add("ln_f.bias", kLnfB, -1, false);

    // The model first: it is the long write, and an interrupted one leaves the directory as it was.
    save_safetensors((d / "model.safetensors").string(), tensors, {{"format", "pt"}}, dtype == HfDtype::kBF16);
    write_small_file((d / "config.json").string(), hf_config_json(config, dtype));
    write_small_file((d / "generation_config.json").string(), hf_generation_config_json(config));
    if (!tokenizer_dir.empty()) {
        write_small_file((d / "vocab.json").string(), vocab);
        write_small_file((d / "merges.txt").string(), merges);
        write_small_file((d / "tokenizer_config.json").string(), hf_tokenizer_config_json(config));
    }
    if (written) *written = names;
}

}  // namespace gpt
