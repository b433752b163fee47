// Hugging Face safetensors (common/model/safetensors.h, docs/formats.md): the format reader on
// hostile files, one case per rule, each a one-line error; the writer; GPT-2 in transformers'
// layout both ways (the Conv1D transposes, the prefix, the ignored keys, config.json); and the
// round trip checkpoint -> directory -> checkpoint, bit for bit and with the same step-0 loss.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cpu/reference_stage.h"
#include "model/checkpoint.h"
#include "model/llmc.h"
#include "model/params.h"
#include "model/safetensors.h"
#include "testing/compare.h"
#include "testing/reference_case.h"
#include "train/gpt.h"
#include "util/bf16.h"
#include "util/error.h"
#include "util/file.h"
#include "util/json.h"
#include "util/rng.h"

using namespace gpt;
using test::error_of;
namespace fs = std::filesystem;

namespace {

// This test's own empty folder (call it once a test).
std::string temp_dir() { return test::scratch_dir("test_safetensors"); }

// A safetensors file written byte by byte: the length (the header's own unless given), the
// header as it is, the data.
std::string write_raw(const std::string& path, const std::string& header, const std::string& data,
                      uint64_t length = UINT64_MAX) {
    if (length == UINT64_MAX) length = header.size();
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    for (int i = 0; i < 8; ++i) f.put(static_cast<char>(length >> (8 * i)));
    f << header << data;
    return path;
}

std::string read_error(const std::string& path) {
    return error_of([&] { read_safetensors_header(path); });
}

// Odd sizes, a head of 4 and a layer count of 3, so that rows, columns, heads and layers are all
// told apart.
const GPTConfig kOdd{7, 101, 3, 3, 12};
// C a multiple of GPT-2's head size, for files without a config.json.
const GPTConfig kHeads64{9, 37, 2, 2, 128};

std::vector<float> random_params(const GPTConfig& c) {
    Rng rng(test::test_seed());
    return test::random_normal(rng, ParamLayout(c).total(), 0.5f, 0.1f);
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// One layer's (out, in) tensor of ours, as (in, out): what a Conv1D stores.
std::vector<float> conv1d_of(const std::vector<float>& params, const GPTConfig& c, ParamTensor t, int layer,
                             size_t out, size_t in) {
    const float* ours = params.data() + ParamLayout(c).offset[t] + size_t(layer) * out * in;
    std::vector<float> stored(out * in);
    for (size_t o = 0; o < out; ++o)
        for (size_t i = 0; i < in; ++i) stored[i * out + o] = ours[o * in + i];
    return stored;
}

// GPT-2 written by hand, as GPT-2's released model.safetensors is: GPT2Model keys (no prefix),
// the causal-mask buffers, Conv1D weights (in, out); `extra` are added as they are.
struct HandWritten {
    std::vector<std::vector<float>> storage;  // the transposed copies
    std::vector<SafetensorsOutput> tensors;
};
HandWritten gpt2_by_hand(const GPTConfig& c, const std::vector<float>& params, const std::string& prefix,
                         bool masks) {
    HandWritten w;
    w.storage.reserve(64);
    const ParamLayout layout(c);
    const uint64_t C = c.n_embd;
    auto plain = [&](const std::string& name, ParamTensor t, int layer, std::vector<uint64_t> shape) {
        uint64_t n = 1;
        for (const uint64_t d : shape) n *= d;
        w.tensors.push_back({prefix + name, shape, params.data() + layout.offset[t] + (layer < 0 ? 0 : layer * n)});
    };
    auto conv = [&](const std::string& name, ParamTensor t, int layer, uint64_t out, uint64_t in) {
        w.storage.push_back(conv1d_of(params, c, t, layer, out, in));
        w.tensors.push_back({prefix + name, {in, out}, w.storage.back().data()});
    };
    static const std::vector<float> mask(size_t(64) * 64, 1.0f), masked_bias(1, -1e4f);
    plain("wte.weight", kWte, -1, {uint64_t(c.vocab_size), C});
    plain("wpe.weight", kWpe, -1, {uint64_t(c.max_seq_len), C});
    for (int l = 0; l < c.n_layer; ++l) {
        const std::string h = "h." + std::to_string(l) + ".";
        plain(h + "ln_1.weight", kLn1W, l, {C});
        plain(h + "ln_1.bias", kLn1B, l, {C});
        if (masks) {
            w.tensors.push_back({prefix + h + "attn.bias", {1, 1, 8, 8}, mask.data()});
            w.tensors.push_back({prefix + h + "attn.masked_bias", {}, masked_bias.data()});
        }
        conv(h + "attn.c_attn.weight", kQkvW, l, 3 * C, C);
        plain(h + "attn.c_attn.bias", kQkvB, l, {3 * C});
        conv(h + "attn.c_proj.weight", kAttProjW, l, C, C);
        plain(h + "attn.c_proj.bias", kAttProjB, l, {C});
        plain(h + "ln_2.weight", kLn2W, l, {C});
        plain(h + "ln_2.bias", kLn2B, l, {C});
        conv(h + "mlp.c_fc.weight", kFcW, l, 4 * C, C);
        plain(h + "mlp.c_fc.bias", kFcB, l, {4 * C});
        conv(h + "mlp.c_proj.weight", kFcProjW, l, C, 4 * C);
        plain(h + "mlp.c_proj.bias", kFcProjB, l, {C});
    }
    plain("ln_f.weight", kLnfW, -1, {C});
    plain("ln_f.bias", kLnfB, -1, {C});
    return w;
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

// ----- the format, on hostile files: one line each, nothing read beyond what the file holds -----

TEST(SafetensorsFormat, ShorterThanItsHeaderLength) {
    const std::string path = temp_dir() + "/short.safetensors";
    std::ofstream(path, std::ios::binary) << "abc";
    EXPECT_EQ(read_error(path), path + ": not a safetensors file (3 bytes, shorter than the 8-byte header length)");
}

TEST(SafetensorsFormat, HeaderLengthBeyondTheFile) {
    const std::string path = write_raw(temp_dir() + "/x.safetensors", "{}", "", 1000);
    EXPECT_EQ(read_error(path), path + ": its header length 1000 runs past the end of the file (2 bytes follow the length)");
    // The largest length there is: nothing is allocated for it.
    write_raw(path, "{}", "", UINT64_MAX - 1);
    EXPECT_EQ(read_error(path), path + ": its header length 18446744073709551614 runs past the end of the file "
                                       "(2 bytes follow the length)");
}

// A header of 100 MB that the file does hold (a sparse file: no disk written) is refused before it
// is read.
TEST(SafetensorsFormat, HeaderOf100MB) {
    const std::string path = write_raw(temp_dir() + "/huge.safetensors", "{", "", 100000000);
    fs::resize_file(path, 8 + 100000000);
    EXPECT_EQ(read_error(path), path + ": a header of 100000000 bytes, more than the 8388608 this reader accepts "
                                       "(GPT-2's are under 100 KB)");
}

TEST(SafetensorsFormat, HeaderNotUtf8) {
    // 0xC0 0xAF: an overlong '/', which a lax decoder would take.
    const std::string path = write_raw(temp_dir() + "/x.safetensors", "{\"a\xC0\xAF\":{}}", "");
    EXPECT_EQ(read_error(path), path + ": header: JSON text is not UTF-8: byte 3 (0xc0) does not begin a "
                                       "well-formed character");
    write_raw(path, "{\"\xFF\":1}", "");
    EXPECT_NE(read_error(path).find("not UTF-8: byte 2 (0xff)"), std::string::npos);
}

TEST(SafetensorsFormat, HeaderNestedDeeply) {
    const std::string path =
        write_raw(temp_dir() + "/x.safetensors", "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}", "");
    EXPECT_EQ(read_error(path), path + ": header: malformed JSON at byte 68: nested deeper than 64 levels");
}

TEST(SafetensorsFormat, HeaderNotAnObjectOrMalformed) {
    const std::string dir = temp_dir();
    EXPECT_EQ(read_error(write_raw(dir + "/a", "[]", "")), dir + "/a: its header is not a JSON object");
    EXPECT_EQ(read_error(write_raw(dir + "/b", "{\"a\": ", "")), dir + "/b: header: malformed JSON at byte 6: unexpected end");
    EXPECT_EQ(read_error(write_raw(dir + "/c", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                                               "\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                                   std::string(8, '\0'))),
              dir + "/c: its header names a key twice");
    EXPECT_EQ(read_error(write_raw(dir + "/d", "{\"t\":[]}", "")), dir + "/d: tensor 't' is described by something other than a JSON object");
    EXPECT_EQ(read_error(write_raw(dir + "/e", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1]}}", "")),
              dir + "/e: tensor 't' has no \"data_offsets\"");
    EXPECT_EQ(read_error(write_raw(dir + "/f", "{\"__metadata__\":{\"format\":1}}", "")),
              dir + "/f: __metadata__ 'format' is not a string");
}

namespace {
std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, uint64_t begin,
                  uint64_t end) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
           std::to_string(begin) + "," + std::to_string(end) + "]}";
}
}  // namespace

TEST(SafetensorsFormat, OffsetsThatOverlap) {
    const std::string path = write_raw(temp_dir() + "/x",
                                       "{" + entry("a", "F32", "[2]", 0, 8) + "," + entry("b", "F32", "[2]", 4, 12) + "}",
                                       std::string(12, '\0'));
    EXPECT_EQ(read_error(path), path + ": tensor 'b' at [4, 12] overlaps tensor 'a' at [0, 8]");
}

TEST(SafetensorsFormat, OffsetsNotInOrder) {
    const std::string path = write_raw(temp_dir() + "/x", "{" + entry("a", "F32", "[2]", 8, 0) + "}", std::string(8, '\0'));
    EXPECT_EQ(read_error(path), path + ": tensor 'a': data_offsets [8, 0] are not in order (begin after end)");
}

TEST(SafetensorsFormat, OffsetsPastTheData) {
    const std::string path = write_raw(temp_dir() + "/x", "{" + entry("a", "F32", "[4]", 0, 16) + "}", std::string(8, '\0'));
    EXPECT_EQ(read_error(path), path + ": tensor 'a': data_offsets [0, 16] run past the data, which holds 8 bytes");
    // Offsets beyond what a double holds exactly, or not whole, are not offsets at all.
    write_raw(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,1e300]}}", std::string(8, '\0'));
    EXPECT_EQ(read_error(path), path + ": tensor 'a': data_offsets is not a pair of byte offsets [begin, end]");
    write_raw(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,16]}}", std::string(8, '\0'));
    EXPECT_EQ(read_error(path), path + ": tensor 'a': data_offsets is not a pair of byte offsets [begin, end]");
}

TEST(SafetensorsFormat, DataWithAHoleOrTrailingBytes) {
    const std::string dir = temp_dir();
    const std::string hole = write_raw(dir + "/hole", "{" + entry("a", "F32", "[1]", 0, 4) + "," +
                                                          entry("b", "F32", "[1]", 8, 12) + "}",
                                       std::string(12, '\0'));
    EXPECT_EQ(read_error(hole), hole + ": bytes [4, 8) of the data belong to no tensor (a hole before tensor 'b')");
    const std::string trailing = write_raw(dir + "/trailing", "{" + entry("a", "F32", "[1]", 0, 4) + "}", std::string(7, '\0'));
    EXPECT_EQ(read_error(trailing), trailing + ": the data holds 7 bytes, its tensors end at byte 4: 3 trailing bytes "
                                               "belong to no tensor");
}

TEST(SafetensorsFormat, DtypeOrShapeThatDoesNotMatch) {
    const std::string path = temp_dir() + "/x";
    write_raw(path, "{" + entry("a", "F32", "[3]", 0, 8) + "}", std::string(8, '\0'));
    EXPECT_EQ(read_error(path), path + ": tensor 'a': shape [3] of F32 needs 12 bytes, its data_offsets [0, 8] span 8");
    write_raw(path, "{" + entry("a", "BF16", "[2, 3]", 0, 8) + "}", std::string(8, '\0'));
    EXPECT_EQ(read_error(path), path + ": tensor 'a': shape [2, 3] of BF16 needs 12 bytes, its data_offsets [0, 8] span 8");
    // A product beyond 64 bits is a mismatch, not an overflow.
    write_raw(path, "{" + entry("a", "F64", "[4294967296, 4294967296, 4294967296]", 0, 8) + "}", std::string(8, '\0'));
    EXPECT_EQ(read_error(path), path + ": tensor 'a': shape [4294967296, 4294967296, 4294967296] of F64 needs more "
                                       "bytes than its data_offsets [0, 8] span 8");
    write_raw(path, "{" + entry("a", "F17", "[2]", 0, 8) + "}", std::string(8, '\0'));
    EXPECT_EQ(read_error(path), path + ": tensor 'a': unknown dtype 'F17'");
    write_raw(path, "{" + entry("a", "F32", "[-2]", 0, 8) + "}", std::string(8, '\0'));
    EXPECT_EQ(read_error(path), path + ": tensor 'a': its shape holds something other than a size");
    write_raw(path, "{" + entry("a", "F32", "[2.5]", 0, 8) + "}", std::string(8, '\0'));
    EXPECT_EQ(read_error(path), path + ": tensor 'a': its shape holds something other than a size");
    // A zero in the shape: no bytes, however large the other sizes.
    write_raw(path, "{" + entry("a", "F32", "[0, 9007199254740992]", 0, 0) + "," + entry("b", "U8", "[8]", 0, 8) + "}",
              std::string(8, '\0'));
    EXPECT_EQ(read_safetensors_header(path).tensors.size(), 2u);
}

// A header may be 8 MiB, but not of tiny values: each costs the parser about 150 bytes.
TEST(SafetensorsFormat, HeaderOfTooManyValues) {
    std::string many = "{\"a\":[";
    for (int i = 0; i < 70000; ++i) many += "0,";
    many += "0]}";
    const std::string path = write_raw(temp_dir() + "/x", many, "");
    EXPECT_EQ(read_error(path), path + ": header: malformed JSON at byte 131074: more than 65536 values");
}

// A shape of many sizes is cut short in a message, which stays one short line.
TEST(SafetensorsFormat, LongShapeStaysShort) {
    std::string shape = "[";
    for (int i = 0; i < 5000; ++i) shape += "1,";
    shape += "1]";
    const std::string path = write_raw(temp_dir() + "/x", "{" + entry("a", "F32", shape, 0, 8) + "}", std::string(8, '\0'));
    EXPECT_EQ(read_error(path), path + ": tensor 'a': shape [1, 1, 1, 1, 1, 1, 1, 1, ... (5001 sizes)] of F32 needs 4 "
                                       "bytes, its data_offsets [0, 8] span 8");
}

// What the safetensors library also reads: no metadata written as null, spaces before the header's
// '{'; and what it refuses, a field given twice.
TEST(SafetensorsFormat, NullMetadataLeadingSpacesAndDuplicateFields) {
    const std::string path = write_raw(temp_dir() + "/x", "  {\"__metadata__\":null," + entry("a", "F32", "[2]", 0, 8) + "}",
                                       std::string(8, '\0'));
    EXPECT_TRUE(read_safetensors_header(path).metadata.empty());
    write_raw(path, "{\"a\":{\"dtype\":\"I64\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", std::string(8, '\0'));
    EXPECT_EQ(read_error(path), path + ": tensor 'a' is described with a field twice");
}

// Names come from the file: a newline in one must not break the one-line error.
TEST(SafetensorsFormat, NamesStayOnOneLine) {
    const std::string path = write_raw(temp_dir() + "/x", "{" + entry("a\\nb", "F32", "[3]", 0, 8) + "}", std::string(8, '\0'));
    EXPECT_EQ(read_error(path), path + ": tensor 'a\\x0ab': shape [3] of F32 needs 12 bytes, its data_offsets [0, 8] span 8");
}

TEST(SafetensorsFormat, ReadsF32F16AndBf16Exactly) {
    // 1.5, -2, the smallest fp16 subnormal (2^-24), fp16's largest (65504); bf16 of 1.5 and -0.
    std::string data;
    for (const float x : {1.5f, -2.0f}) data.append(reinterpret_cast<const char*>(&x), 4);
    for (const uint16_t h : {0x3E00, 0x0001, 0x7BFF}) data.append(reinterpret_cast<const char*>(&h), 2);
    for (const uint16_t h : {0x3FC0, 0x8000}) data.append(reinterpret_cast<const char*>(&h), 2);
    data.append(8, '\x01');  // an I64 of no concern to the model
    const std::string path = write_raw(temp_dir() + "/x",
                                       "{\"__metadata__\":{\"format\":\"pt\"}," + entry("f32", "F32", "[2]", 0, 8) + "," +
                                           entry("f16", "F16", "[3]", 8, 14) + "," + entry("bf16", "BF16", "[1, 2]", 14, 18) +
                                           "," + entry("i64", "I64", "[]", 18, 26) + "}",
                                       data);
    const SafetensorsFile file = read_safetensors_header(path);
    EXPECT_EQ(file.metadata.at("format"), "pt");
    ASSERT_EQ(file.tensors.size(), 4u);
    EXPECT_EQ(file.tensors[0].name, "f32");  // by offset, whatever the order of the keys
    EXPECT_EQ(read_safetensors_floats(file, *file.find("f32")), (std::vector<float>{1.5f, -2.0f}));
    EXPECT_EQ(read_safetensors_floats(file, *file.find("f16")), (std::vector<float>{1.5f, std::ldexp(1.0f, -24), 65504.0f}));
    const std::vector<float> b = read_safetensors_floats(file, *file.find("bf16"));
    EXPECT_EQ(b[0], 1.5f);
    EXPECT_TRUE(b[1] == 0.0f && std::signbit(b[1]));
    EXPECT_EQ(file.find("i64")->elements(), 1u);
    EXPECT_EQ(error_of([&] { read_safetensors_floats(file, *file.find("i64")); }),
              path + ": tensor 'i64': its dtype is I64; this reader takes F32, F16 and BF16");
}

// What the writer makes is what the reader reads, and the safetensors library's layout: the
// header padded with spaces to 8 bytes, the metadata, the tensors in the order given.
TEST(SafetensorsFormat, WriterRoundTrip) {
    const std::string path = temp_dir() + "/w.safetensors";
    const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {0.1f, -3e38f};
    save_safetensors(path, {{"a", {2, 3}, a.data()}, {"a_t", {3, 2}, a.data(), true}, {"b", {2}, b.data()}},
                     {{"format", "pt"}, {"note", "a \"quoted\" line\n"}}, false);
    EXPECT_FALSE(fs::exists(path + ".tmp"));
    const SafetensorsFile f = read_safetensors_header(path);
    EXPECT_EQ(f.data_start % 8, 0u);
    EXPECT_EQ(f.metadata.at("note"), "a \"quoted\" line\n");
    ASSERT_EQ(f.tensors.size(), 3u);
    EXPECT_EQ(f.tensors[1].name, "a_t");
    EXPECT_EQ(f.tensors[1].shape, (std::vector<uint64_t>{3, 2}));
    EXPECT_EQ(read_safetensors_floats(f, *f.find("a")), a);
    EXPECT_EQ(read_safetensors_floats(f, *f.find("a_t")), (std::vector<float>{1, 4, 2, 5, 3, 6}));
    EXPECT_EQ(read_safetensors_floats(f, *f.find("b")), b);
    save_safetensors(path, {{"b", {2}, b.data()}}, {}, true);
    const SafetensorsFile g = read_safetensors_header(path);
    EXPECT_EQ(g.find("b")->dtype, "BF16");
    EXPECT_EQ(read_safetensors_floats(g, *g.find("b")), (std::vector<float>{round_to_bf16(0.1f), round_to_bf16(-3e38f)}));
}

// ----- GPT-2 in the Hugging Face layout -----

TEST(HfGpt2, Fp32RoundTripIsBitIdentical) {
    const std::vector<float> params = random_params(kOdd);
    const std::string dir = temp_dir() + "/hf";
    std::vector<std::string> written;
    save_hf_gpt2(dir, kOdd, params, HfDtype::kF32, "", &written);
    EXPECT_EQ(written, (std::vector<std::string>{"model.safetensors", "config.json", "generation_config.json"}));
    for (const std::string& name : written) EXPECT_FALSE(fs::exists(dir + "/" + name + ".tmp"));
    const HfImport back = load_hf_gpt2(dir);
    EXPECT_TRUE(back.checkpoint.config == kOdd) << back.checkpoint.config.describe();
    EXPECT_TRUE(bit_identical(back.checkpoint.params, params));
    EXPECT_EQ(back.checkpoint.step, 0);
    EXPECT_TRUE(back.checkpoint.m.empty());
    EXPECT_FALSE(back.checkpoint.run.recorded);
    ASSERT_EQ(back.notes.size(), 2u);
    EXPECT_EQ(back.notes[0], dir + "/model.safetensors: GPT-2 in the Hugging Face layout (GPT2LMHeadModel keys, "
                                   "'transformer.' prefix), 40 tensors of F32 read");
    EXPECT_EQ(back.notes[1], "sizes from the tensors' shapes and n_head 3 from " + dir + "/config.json, which agrees with them");
    // The file itself and the directory name the same model.
    EXPECT_TRUE(bit_identical(load_hf_gpt2(dir + "/model.safetensors").checkpoint.params, params));

    // What transformers reads in config.json.
    const Json config = Json::parse_file(dir + "/config.json");
    EXPECT_EQ(config["n_layer"].number, 3);
    EXPECT_EQ(config["n_head"].number, 3);
    EXPECT_EQ(config["n_embd"].number, 12);
    EXPECT_EQ(config["n_positions"].number, 7);
    EXPECT_EQ(config["vocab_size"].number, 101);
    EXPECT_EQ(config["activation_function"].string, "gelu_new");
    EXPECT_EQ(config["torch_dtype"].string, "float32");
    EXPECT_EQ(config["bos_token_id"].kind, Json::Null);  // no <|endoftext|> among 101 tokens
    EXPECT_EQ(read_safetensors_header(dir + "/model.safetensors").metadata.at("format"), "pt");  // transformers checks it
}

// The round trip through the tool's two halves, with the step-0 loss of the CPU model.
TEST(HfGpt2, RoundTripGivesTheSameStep0Loss) {
    const test::ReferenceCase c = test::overfit_case();
    const std::string dir = temp_dir() + "/hf", ckpt = temp_dir() + "/back.ckpt";
    save_hf_gpt2(dir, c.config, c.params, HfDtype::kF32, "");
    Checkpoint back = load_hf_gpt2(dir).checkpoint;
    save_checkpoint(ckpt, back);
    back = load_checkpoint(ckpt);
    ASSERT_TRUE(bit_identical(back.params, c.params));
    auto step0_loss = [&](const std::vector<float>& params) {
        GPT<CpuReference> model(c.config, c.B, c.T);
        model.set_parameters(params);
        model.forward(c.tokens.data(), c.tokens.data() + 1, c.B, c.T);
        model.evaluate();
        return model.sync().loss;
    };
    const float before = step0_loss(c.params), after = step0_loss(back.params);
    EXPECT_EQ(std::memcmp(&before, &after, sizeof(float)), 0) << before << " vs " << after;
}

TEST(HfGpt2, Bf16IsRoundedToNearestEven) {
    const std::vector<float> params = random_params(kOdd);
    const std::string dir = temp_dir() + "/hf";
    save_hf_gpt2(dir, kOdd, params, HfDtype::kBF16, "");
    EXPECT_EQ(Json::parse_file(dir + "/config.json")["torch_dtype"].string, "bfloat16");
    const HfImport back = load_hf_gpt2(dir);
    std::vector<float> rounded(params.size());
    for (size_t i = 0; i < params.size(); ++i) rounded[i] = round_to_bf16(params[i]);
    EXPECT_TRUE(bit_identical(back.checkpoint.params, rounded));
    EXPECT_NE(back.notes[0].find("of BF16 read"), std::string::npos) << back.notes[0];
    // A value bf16 cannot hold is refused, not written as infinity.
    std::vector<float> big = params;
    big[ParamLayout(kOdd).offset[kWpe] + 3] = 3.4e38f;
    EXPECT_EQ(error_of([&] { save_hf_gpt2(dir, kOdd, big, HfDtype::kBF16, ""); }),
              "not writing the Hugging Face directory " + dir + ": parameter 3 of wpe is 3.4e+38, beyond the range of bf16");
}

// Conv1D weights are stored (in, out): element [i][o] of c_attn.weight is row o, column i of ours.
TEST(HfGpt2, Conv1dWeightsAreStoredTransposed) {
    const std::vector<float> params = random_params(kOdd);
    const std::string dir = temp_dir() + "/hf";
    save_hf_gpt2(dir, kOdd, params, HfDtype::kF32, "");
    const SafetensorsFile file = read_safetensors_header(dir + "/model.safetensors");
    const size_t C = kOdd.n_embd;
    struct Case {
        const char* key;
        ParamTensor tensor;
        size_t out, in;
    };
    for (const Case& k : {Case{"attn.c_attn.weight", kQkvW, 3 * C, C}, Case{"attn.c_proj.weight", kAttProjW, C, C},
                          Case{"mlp.c_fc.weight", kFcW, 4 * C, C}, Case{"mlp.c_proj.weight", kFcProjW, C, 4 * C}}) {
        const std::string name = std::string("transformer.h.2.") + k.key;
        ASSERT_NE(file.find(name), nullptr) << name;
        EXPECT_EQ(file.find(name)->shape, (std::vector<uint64_t>{k.in, k.out})) << name;
        EXPECT_EQ(read_safetensors_floats(file, *file.find(name)), conv1d_of(params, kOdd, k.tensor, 2, k.out, k.in))
            << name;
    }
    // Embeddings, biases and LayerNorms as they are.
    const ParamLayout layout(kOdd);
    const std::vector<float> wte(params.begin(), params.begin() + layout.size[kWte]);
    EXPECT_EQ(read_safetensors_floats(file, *file.find("transformer.wte.weight")), wte);
    const auto bias = params.begin() + layout.offset[kQkvB] + 2 * 3 * C;
    EXPECT_EQ(read_safetensors_floats(file, *file.find("transformer.h.2.attn.c_attn.bias")),
              std::vector<float>(bias, bias + 3 * C));
    EXPECT_EQ(file.find("lm_head.weight"), nullptr);  // tied: transformers ties it to wte on loading
}

// GPT-2's released file: no prefix, causal-mask buffers, no config.json beside it; and
// GPT2LMHeadModel's with lm_head.weight written out and a key of something else.
TEST(HfGpt2, ReleasedLayoutMasksLmHeadAndUnknownKeys) {
    const std::vector<float> params = random_params(kHeads64);
    const std::string dir = temp_dir();
    HandWritten w = gpt2_by_hand(kHeads64, params, "", true);
    save_safetensors(dir + "/model.safetensors", w.tensors, {{"format", "pt"}}, false);
    HfImport got = load_hf_gpt2(dir);
    EXPECT_TRUE(got.checkpoint.config == kHeads64) << got.checkpoint.config.describe();
    EXPECT_TRUE(bit_identical(got.checkpoint.params, params));
    ASSERT_EQ(got.notes.size(), 3u);
    EXPECT_EQ(got.notes[0], dir + "/model.safetensors: GPT-2 in the Hugging Face layout (GPT2Model keys), "
                                  "28 tensors of F32 read");
    EXPECT_EQ(got.notes[1], "no config.json beside it: sizes from the tensors' shapes, n_head = n_embd / 64 = 2 "
                            "(GPT-2's head size)");
    EXPECT_EQ(got.notes[2], "ignored 4 causal-mask buffers (h.N.attn.bias, h.N.attn.masked_bias): the attention makes its own");

    w = gpt2_by_hand(kHeads64, params, "transformer.", false);
    const ParamLayout layout(kHeads64);
    w.tensors.push_back({"lm_head.weight", {37, 128}, params.data()});
    const std::vector<float> other(5, 1.0f);
    w.tensors.push_back({"transformer.h.0.attn.rotary", {5}, other.data()});
    w.tensors.push_back({"score.weight", {5}, other.data()});
    save_safetensors(dir + "/model.safetensors", w.tensors, {{"format", "pt"}}, false);
    got = load_hf_gpt2(dir);
    EXPECT_TRUE(bit_identical(got.checkpoint.params, params));
    ASSERT_EQ(got.notes.size(), 4u);
    EXPECT_EQ(got.notes[2], "ignored lm_head.weight: the same values as wte.weight (tied)");
    EXPECT_EQ(got.notes[3], "ignored 2 unknown keys: 'transformer.h.0.attn.rotary', 'score.weight'");

    // An untied head is another model.
    std::vector<float> head(params.begin(), params.begin() + layout.size[kWte]);
    head[40] += 1.0f;
    w.tensors[w.tensors.size() - 3].values = head.data();
    save_safetensors(dir + "/model.safetensors", w.tensors, {}, false);
    EXPECT_EQ(error_of([&] { load_hf_gpt2(dir); }),
              dir + "/model.safetensors: lm_head.weight differs from wte.weight (element 40): this project's LM head "
                    "is the token embedding (tied), as in GPT-2");
}

// safetensors' save_model keeps one name of a tied pair: lm_head.weight, without wte.weight. And a
// stray key of a layer that does not exist (a mask buffer) makes no layer.
TEST(HfGpt2, LmHeadInsteadOfWteAndStrayLayerKeys) {
    const std::vector<float> params = random_params(kHeads64);
    const std::string dir = temp_dir();
    HandWritten w = gpt2_by_hand(kHeads64, params, "transformer.", false);
    ASSERT_EQ(w.tensors[0].name, "transformer.wte.weight");
    w.tensors[0].name = "lm_head.weight";
    const std::vector<float> mask(64, 1.0f);
    w.tensors.push_back({"transformer.h.7.attn.bias", {1, 1, 8, 8}, mask.data()});
    save_safetensors(dir + "/model.safetensors", w.tensors, {{"format", "pt"}}, false);
    const HfImport got = load_hf_gpt2(dir);
    EXPECT_TRUE(got.checkpoint.config == kHeads64) << got.checkpoint.config.describe();
    EXPECT_TRUE(bit_identical(got.checkpoint.params, params));
    ASSERT_EQ(got.notes.size(), 4u);
    EXPECT_EQ(got.notes[2], "ignored 1 causal-mask buffers (h.N.attn.bias, h.N.attn.masked_bias): the attention makes its own");
    EXPECT_EQ(got.notes[3], "wte.weight read from lm_head.weight: the file keeps one name of the tied pair");
}

TEST(HfGpt2, MissingKeyOrWrongShapeIsNamed) {
    const std::vector<float> params = random_params(kOdd);
    const std::string dir = temp_dir();
    save_hf_gpt2(dir, kOdd, params, HfDtype::kF32, "");
    HandWritten w = gpt2_by_hand(kOdd, params, "transformer.", false);
    std::vector<SafetensorsOutput> without;
    for (const SafetensorsOutput& t : w.tensors)
        if (t.name != "transformer.h.1.mlp.c_fc.bias") without.push_back(t);
    save_safetensors(dir + "/model.safetensors", without, {}, false);
    EXPECT_EQ(error_of([&] { load_hf_gpt2(dir); }), dir + "/model.safetensors: missing key transformer.h.1.mlp.c_fc.bias");

    // c_attn.weight stored as ours (out, in) instead of Conv1D's (in, out).
    w.tensors[4].shape = {36, 12};
    ASSERT_EQ(w.tensors[4].name, "transformer.h.0.attn.c_attn.weight");
    save_safetensors(dir + "/model.safetensors", w.tensors, {}, false);
    EXPECT_EQ(error_of([&] { load_hf_gpt2(dir); }),
              dir + "/model.safetensors: transformer.h.0.attn.c_attn.weight has shape [36, 12], expected [12, 36] for "
                    "L=3 H=3 C=12 maxT=7 V=101");

    save_safetensors(dir + "/model.safetensors", {{"x", {1}, params.data()}}, {}, false);
    EXPECT_EQ(error_of([&] { load_hf_gpt2(dir); }),
              dir + "/model.safetensors: no key wte.weight or wpe.weight (with or without the prefix 'transformer.'): "
                    "not a GPT-2 in the Hugging Face layout");
}

TEST(HfGpt2, NonFiniteValueIsNamed) {
    std::vector<float> params = random_params(kOdd);
    const std::string dir = temp_dir();
    HandWritten w = gpt2_by_hand(kOdd, params, "", false);
    std::vector<float> ln = {params.begin() + ParamLayout(kOdd).offset[kLn2B], params.begin() + ParamLayout(kOdd).offset[kLn2B] + 12};
    ln[5] = std::nanf("");
    for (SafetensorsOutput& t : w.tensors)
        if (t.name == "h.0.ln_2.bias") t.values = ln.data();
    save_safetensors(dir + "/model.safetensors", w.tensors, {}, false);
    write_text(dir + "/config.json", "{\"n_head\": 3}");
    EXPECT_EQ(error_of([&] { load_hf_gpt2(dir); }), dir + "/model.safetensors: h.0.ln_2.bias: element 5 is nan");
}

// config.json must describe the tensors it sits beside, and a model this project computes.
TEST(HfGpt2, ConfigJsonMustAgree) {
    const std::vector<float> params = random_params(kOdd);
    const std::string dir = temp_dir(), config = dir + "/config.json";
    save_hf_gpt2(dir, kOdd, params, HfDtype::kF32, "");
    const std::string error_start = config + ": ";
    struct Case {
        std::string json, error;
    };
    const std::vector<Case> cases = {
        {"{\"n_embd\": 16, \"n_head\": 3}", "\"n_embd\" is 16, but wte.weight's shape says 12"},
        {"{\"vocab_size\": 50257, \"n_head\": 3}", "\"vocab_size\" is 50257, but wte.weight's shape says 101"},
        {"{\"n_positions\": 1024, \"n_head\": 3}", "\"n_positions\" is 1024, but wpe.weight's shape says 7"},
        {"{\"n_head\": 3, \"activation_function\": \"relu\"}",
         "\"activation_function\" is 'relu'; this project's GPT-2 uses GELU's tanh approximation (\"gelu_new\")"},
        {"{\"n_head\": 3, \"layer_norm_epsilon\": 1e-6}", "\"layer_norm_epsilon\" is not 1e-05, the epsilon of this project's LayerNorm"},
        {"{\"n_head\": 3, \"layer_norm_epsilon\": NaN}", "\"layer_norm_epsilon\" is not 1e-05, the epsilon of this project's LayerNorm"},
        {"{\"n_head\": 3, \"n_inner\": 40}", "\"n_inner\" is 40; this project's GPT-2 has an MLP of 4 x n_embd = 48"},
        {"{\"n_head\": 3, \"model_type\": \"llama\"}", "\"model_type\" is 'llama', not \"gpt2\""},
        {"{\"n_head\": 3, \"scale_attn_by_inverse_layer_idx\": true}",
         "\"scale_attn_by_inverse_layer_idx\" is true: this project's attention does not scale by layer"},
        {"{\"n_head\": 3.5}", "\"n_head\" is not a size"},
        {"[1, 2]", "not a JSON object"},
    };
    for (const Case& c : cases) {
        write_text(config, c.json);
        EXPECT_EQ(error_of([&] { load_hf_gpt2(dir); }), error_start + c.error) << c.json;
    }
    write_text(config, "{\"n_head\": 3, \"n_layer\": 2}");
    EXPECT_EQ(error_of([&] { load_hf_gpt2(dir); }),
              dir + "/model.safetensors: holds layer 2 (transformer.h.2.*), but " + config + " says n_layer 2");
    write_text(config, "{\"n_head\": 5}");
    EXPECT_EQ(error_of([&] { load_hf_gpt2(dir); }),
              dir + "/model.safetensors: invalid model config (L=3 H=5 C=12 maxT=7 V=101): C must be divisible by H");
    write_text(config, "{\"n_head\": 0}");  // given, so not inferred: refused as zero
    EXPECT_EQ(error_of([&] { load_hf_gpt2(dir); }),
              dir + "/model.safetensors: invalid model config (L=3 H=0 C=12 maxT=7 V=101): every size must be positive");
    write_text(config, "{\"n_head\": 3,");
    EXPECT_NE(error_of([&] { load_hf_gpt2(dir); }).find("JSON file " + config + ": malformed JSON"), std::string::npos);
    write_text(config, "{}");  // no n_head, and C = 12 is no multiple of 64
    EXPECT_EQ(error_of([&] { load_hf_gpt2(dir); }),
              dir + "/model.safetensors: n_embd 12 is not a multiple of GPT-2's head size 64, so the number of heads "
                    "cannot be told from the shapes: put a config.json with n_head beside it");
}

// config.json is checked before the sizes are validated: its arithmetic must not overflow on
// shapes that no model has (here an empty embedding a billion wide).
TEST(HfGpt2, ConfigCheckedBeforeTheSizesDoesNotOverflow) {
    const std::string dir = temp_dir();
    write_raw(dir + "/model.safetensors",
              "{" + entry("wte.weight", "F32", "[0, 1000000000]", 0, 0) + "," +
                  entry("wpe.weight", "F32", "[0, 1000000000]", 0, 0) + "}",
              "");
    write_text(dir + "/config.json", "{\"n_inner\": 1}");
    EXPECT_EQ(error_of([&] { load_hf_gpt2(dir); }),
              dir + "/config.json: \"n_inner\" is 1; this project's GPT-2 has an MLP of 4 x n_embd = 4000000000");
}

TEST(HfGpt2, DirectoryWithoutTheModel) {
    const std::string dir = temp_dir();
    EXPECT_EQ(error_of([&] { load_hf_gpt2(dir); }),
              dir + ": a directory without model.safetensors (the Hugging Face layout; see docs/formats.md)");
    EXPECT_EQ(error_of([&] { load_model_file(dir); }),
              dir + ": a directory without model.safetensors (the Hugging Face layout; see docs/formats.md)");
    write_text(dir + "/model.safetensors.index.json", "{}");
    EXPECT_EQ(error_of([&] { load_hf_gpt2(dir); }),
              dir + ": a directory without model.safetensors (a model in several shards, which this project does not read)");
}

TEST(HfGpt2, TokenizerOfAnotherVocabularyIsRefused) {
    const std::string dir = temp_dir();
    const std::string tokenizer = std::string(GPT_DATA_DIR) + "/gpt2";
    if (!fs::exists(tokenizer + "/encoder.json")) GTEST_SKIP() << "no GPT-2 tokenizer in " << tokenizer;
    EXPECT_EQ(error_of([&] { save_hf_gpt2(dir + "/hf", kOdd, random_params(kOdd), HfDtype::kF32, tokenizer); }),
              "not writing the Hugging Face directory " + dir + "/hf: the tokenizer in " + tokenizer +
                  " has 50257 tokens, the model's vocabulary 101 (write no tokenizer files, or give the model's own "
                  "tokenizer)");
    EXPECT_FALSE(fs::exists(dir + "/hf"));  // refused before anything was written
}

// --init takes three kinds of files; --resume only checkpoints.
TEST(HfGpt2, ModelFileOfTheThirdKind) {
    const std::vector<float> params = random_params(kOdd);
    const std::string dir = temp_dir() + "/hf";
    save_hf_gpt2(dir, kOdd, params, HfDtype::kF32, "");
    EXPECT_EQ(model_file_kind(dir), ModelFileKind::kSafetensors);
    EXPECT_EQ(model_file_kind(dir + "/model.safetensors"), ModelFileKind::kSafetensors);
    const std::string spaced = write_raw(dir + "/../spaced.safetensors", "  {}", "");
    EXPECT_EQ(model_file_kind(spaced), ModelFileKind::kSafetensors);  // as the safetensors library reads it
    std::vector<std::string> notes;
    EXPECT_TRUE(bit_identical(load_model_file(dir, &notes).params, params));
    EXPECT_EQ(notes.size(), 2u);
    EXPECT_EQ(error_of([&] { load_checkpoint(dir + "/model.safetensors"); }),
              "checkpoint " + dir + "/model.safetensors: a safetensors file, not a checkpoint of this project: it "
                                    "holds parameters only; start from it with --init");
}
