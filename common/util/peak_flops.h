// The MFU denominator: a GPU's dense bf16 tensor-core peak (fp32 accumulation). Plain C++ on
// what the CUDA runtime reports (name, compute capability, SMs, clock), so that the CPU tests
// check it; common/cuda/device.cuh asks the GPU. Which GPUs a stage runs on is
// common/util/compute_capability.h.
#pragma once
#include <cctype>
#include <cstdio>
#include <string>

namespace gpt {

// One row of the peak table: a GPU, by words of the name it reports, and its data-sheet peak.
struct PeakEntry {
    const char* match;  // "H100 PCIe" matches "NVIDIA H100 PCIe"
    double tflops;      // dense (no sparsity); 0: no bf16 tensor cores, MFU is not reported
};

// Whether `word` occurs in `name` as whole words: "A10" is in "NVIDIA A10" but not in
// "NVIDIA A100-SXM4-40GB", "H200" not in "NVIDIA GH200 480GB".
inline bool has_words(const std::string& name, const std::string& word) {
    auto is_word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
    for (size_t at = name.find(word); at != std::string::npos; at = name.find(word, at + 1)) {
        const size_t end = at + word.size();
        if ((at == 0 || !is_word_char(name[at - 1])) && (end == name.size() || !is_word_char(name[end])))
            return true;
    }
    return false;
}

// The table, from the vendor data sheets. The first match wins, so the more specific names
// come first.
inline constexpr PeakEntry kPeakTable[] = {
    {"H100 PCIe", 756},  // before "H100"
    {"H100 NVL", 835},
    {"H100", 989},  // SXM, which reports itself as "NVIDIA H100 80GB HBM3"
    {"GH200", 989},
    {"H200 NVL", 835},
    {"H200", 989},
    {"B200", 2250},
    {"A100", 312},  // 40 GB and 80 GB, SXM and PCIe alike
    {"A800", 312},
    {"L40S", 362},
    {"L40", 181},
    {"L4", 121},
    {"RTX 4090", 165},  // GeForce: half-rate fp32 accumulation
    {"RTX 3090", 71},
    {"A10G", 70},
    {"A10", 125},
    {"T4", 0},  // sm_75: fp16 tensor cores only
};

// The table's entry for a GPU name, or nullptr when the GPU is not in it.
inline const PeakEntry* find_peak(const std::string& name) {
    for (const PeakEntry& p : kPeakTable)
        if (has_words(name, p.match)) return &p;
    return nullptr;
}

// The data-sheet peak in FLOP/s; 0 when the table has none (MFU is then not reported).
inline double peak_bf16_flops(const std::string& name) {
    const PeakEntry* p = find_peak(name);
    return p ? p->tflops * 1e12 : 0.0;
}

// Which table entry gave that peak ("H100" for "NVIDIA H100 80GB HBM3"); empty when none did.
// Written into the trainer's log, so that a reader sees where the MFU denominator came from.
inline std::string peak_bf16_match(const std::string& name) {
    const PeakEntry* p = find_peak(name);
    return p && p->tflops > 0 ? p->match : "";
}

// Dense bf16 FLOPs one SM does per clock with fp32 accumulation, by compute capability; 0 before
// Ampere (no bf16 tensor cores). An architecture not listed gets the rate of the newest listed
// one at or below it. Where one compute capability has two kinds of part (sm_86, sm_89, sm_120)
// this is the GeForce rate, which accumulates in fp32 at half speed; A10, A40, L4 and L40S do
// twice as much. An estimate can thus understate a peak (and overstate MFU): the table comes first.
inline double bf16_flops_per_sm_per_clock(int major, int minor) {
    struct Rate {
        int major, minor;
        double flops;
    };
    static const Rate kRates[] = {
        {8, 0, 2048},   // A100: 108 SMs x 1.41 GHz x 2048 = 312 TFLOP/s
        {8, 6, 512},    // RTX 3090: 82 SMs x 1.695 GHz x 512 = 71 TFLOP/s
        {8, 7, 2048},   // Jetson Orin: A100's tensor cores
        {8, 9, 512},    // RTX 4090: 128 SMs x 2.52 GHz x 512 = 165 TFLOP/s
        {9, 0, 4096},   // H100 SXM: 132 SMs x 1.83 GHz x 4096 = 989 TFLOP/s
        {10, 0, 8192},  // B200
        {12, 0, 512},   // RTX 5090 (GeForce Blackwell)
    };
    double flops = 0;
    for (const Rate& r : kRates)
        if (major > r.major || (major == r.major && minor >= r.minor)) flops = r.flops;
    return flops;
}

// An estimate of the peak in FLOP/s from the SM count and the clock (kHz, as CUDA reports it),
// for a GPU the table does not know; 0 when the inputs or the result make no sense, so that a
// broken query never becomes an MFU.
inline double estimate_bf16_peak(int major, int minor, int sms, int clock_khz) {
    if (sms <= 0 || clock_khz <= 0) return 0.0;
    const double peak = double(sms) * double(clock_khz) * 1e3 * bf16_flops_per_sm_per_clock(major, minor);
    const double kSmallest = 1e12, kLargest = 1e16;  // 1 TFLOP/s to 10 PFLOP/s: any real GPU
    return peak >= kSmallest && peak <= kLargest ? peak : 0.0;
}

// A GPU's MFU denominator and where it came from.
struct PeakFlops {
    double flops = 0;     // FLOP/s; 0: unknown, MFU is not reported
    std::string source;   // the table entry, "estimate", or empty when there is no peak
    std::string warning;  // one line for the log when the table does not know the GPU
};

// The peak of a GPU described by what CUDA reports about it: the table's, else an estimate.
inline PeakFlops bf16_peak(const std::string& name, int major, int minor, int sms, int clock_khz) {
    PeakFlops peak;
    if (const PeakEntry* entry = find_peak(name)) {
        if (entry->tflops > 0) {
            peak.flops = entry->tflops * 1e12;
            peak.source = entry->match;
        }
        return peak;
    }
    // Before Ampere (T4, RTX 20xx: stage 00) there is no bf16 peak to miss: MFU is n/a, as for the
    // table's T4, without a warning that the table lacks the GPU.
    if (bf16_flops_per_sm_per_clock(major, minor) == 0) return peak;
    const std::string unknown = "warning: GPU " + name + " is not in the peak table of common/util/peak_flops.h; ";
    peak.flops = estimate_bf16_peak(major, minor, sms, clock_khz);
    if (peak.flops == 0) {
        peak.warning = unknown + "MFU is not reported";
        return peak;
    }
    char line[160];
    std::snprintf(line, sizeof(line), "MFU uses an estimate of %.0f TFLOP/s from its %d SMs at %.2f GHz (sm_%d%d)",
                  peak.flops / 1e12, sms, clock_khz / 1e6, major, minor);
    peak.source = "estimate";
    peak.warning = unknown + line;
    return peak;
}

}  // namespace gpt
