#include "train/memory.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>

#include "util/error.h"

namespace gpt {

namespace {

constexpr size_t kUnknown = std::numeric_limits<size_t>::max();

// The number a kernel file starts with; kUnknown if there is none ("max" means no limit).
size_t read_number(const std::string& path) {
    std::ifstream in(path);
    unsigned long long v = 0;
    return in >> v ? static_cast<size_t>(v) : kUnknown;
}

size_t meminfo_available() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    unsigned long long kib = 0;
    while (in >> key >> kib) {
        if (key == "MemAvailable:") return static_cast<size_t>(kib) * 1024;
        in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');  // the unit
    }
    return kUnknown;
}

// Room under the memory limits (cgroup v2) of this process's group and of every group above it:
// a limit anywhere on the way up applies.
size_t cgroup_room() {
    std::ifstream in("/proc/self/cgroup");
    std::string line, group;
    while (std::getline(in, line))
        if (line.rfind("0::", 0) == 0) group = line.substr(3);
    const std::string root = "/sys/fs/cgroup";
    std::string dir = root + (group == "/" ? "" : group);
    size_t room = kUnknown;
    while (dir.size() >= root.size()) {
        const size_t limit = read_number(dir + "/memory.max"), used = read_number(dir + "/memory.current");
        if (limit != kUnknown && used != kUnknown) room = std::min(room, limit > used ? limit - used : 0);
        if (dir == root) break;
        dir.erase(dir.rfind('/'));
    }
    return room;
}

// "28.8 GiB", or "412 MiB" below one GiB (a small model's estimate is not "0.4 GiB").
std::string memory_text(double bytes) {
    char buf[32];
    const double mib = bytes / (1024.0 * 1024.0);
    if (mib < 1023.5) std::snprintf(buf, sizeof(buf), "%.0f MiB", mib);
    else std::snprintf(buf, sizeof(buf), "%.1f GiB", mib / 1024.0);
    return buf;
}

}  // namespace

size_t available_host_memory() { return std::min(meminfo_available(), cgroup_room()); }

size_t memory_limit_from_environment() {
    const char* value = std::getenv("GPT_MEMORY_LIMIT");
    if (!value || !*value) return 0;
    const std::string text = value;
    const auto refuse = [&] {
        return Error("GPT_MEMORY_LIMIT='" + text + "' is not a size: give bytes, or a number with K, M, G or T " +
                     "(powers of 1024), such as 512M or 15.5G");
    };
    char* end = nullptr;
    errno = 0;
    const double number = std::strtod(value, &end);
    if (end == value || errno != 0 || !std::isfinite(number) || number <= 0 || !std::isdigit((unsigned char)*value))
        throw refuse();
    const std::string unit = end;
    double scale = 1;
    if (unit == "K" || unit == "k") scale = 1024.0;
    else if (unit == "M") scale = 1024.0 * 1024;
    else if (unit == "G") scale = 1024.0 * 1024 * 1024;
    else if (unit == "T") scale = 1024.0 * 1024 * 1024 * 1024;
    else if (!unit.empty()) throw refuse();
    const double bytes = number * scale;
    if (bytes < 1 || bytes >= double(std::numeric_limits<size_t>::max())) throw refuse();
    return static_cast<size_t>(bytes);
}

MemoryNeed available_memory(size_t free_device, bool model_on_device) {
    MemoryNeed available{free_device, available_host_memory()};
    if (const size_t limit = memory_limit_from_environment()) {
        size_t& model = model_on_device ? available.device : available.host;
        model = std::min(model, limit);
    }
    return available;
}

namespace {

// need(b) = fixed + b * per_sequence for each kind of memory, in double: no product of a huge
// batch can overflow.
struct Kind {
    const char* name;
    double fixed, per_sequence, available;
    double need(double B) const { return fixed + per_sequence * B; }
};

std::array<Kind, 2> kinds(const MemoryNeed& one, const MemoryNeed& two, const MemoryNeed& available) {
    const auto kind = [](const char* name, size_t one, size_t two, size_t available) {
        const double per = double(two) - double(one);
        return Kind{name, double(one) - per, per, double(available)};
    };
    return {kind("device", one.device, two.device, available.device),
            kind("host", one.host, two.host, available.host)};
}

}  // namespace

bool fits_in_memory(const MemoryNeed& one, const MemoryNeed& two, int B, const MemoryNeed& available) {
    return memory_shortfall(one, two, B, available).empty();
}

std::string memory_shortfall(const MemoryNeed& one, const MemoryNeed& two, int B, const MemoryNeed& available,
                             bool itemized) {
    for (const Kind& k : kinds(one, two, available)) {
        if (k.need(B) <= k.available) continue;
        const size_t limit = memory_limit_from_environment();
        const bool limited = limit > 0 && double(limit) == k.available;  // the limit, not the machine, said no
        return "needs about " + memory_text(k.need(B)) + " of " + k.name + " memory" +
               (itemized ? " (parameters, gradients, AdamW state, activations)" : "") + ", but " +
               memory_text(k.available) + " is available" + (limited ? " (GPT_MEMORY_LIMIT)" : "");
    }
    return "";
}

void require_memory(const MemoryNeed& one, const MemoryNeed& two, int B, const MemoryNeed& available,
                    const std::string& run) {
    const std::string shortfall = memory_shortfall(one, two, B, available, true);
    if (shortfall.empty()) return;
    double largest = B;  // the largest batch that fits in every kind of memory
    for (const Kind& k : kinds(one, two, available)) {
        const double room = k.available - k.fixed;
        largest = std::min(largest, k.per_sequence > 0 ? std::floor(room / k.per_sequence) : room < 0 ? 0 : largest);
    }
    throw Error(run + " " + shortfall + "; " +
                (largest >= 1 ? "the largest --batch that fits is " + std::to_string(static_cast<long long>(largest))
                              : std::string("not even --batch 1 fits: use a smaller --model or a shorter --seq")));
}

}  // namespace gpt
