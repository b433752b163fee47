#include "util/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <utility>

namespace fs = std::filesystem;

namespace gpt {

namespace {

std::string prefix(const std::string& what, const std::string& path) {
    return what.empty() ? path : what + " " + path;
}

const char* kind(fs::file_type type) {
    switch (type) {
        case fs::file_type::regular: return "a regular file";
        case fs::file_type::directory: return "a directory";
        case fs::file_type::fifo: return "a FIFO (named pipe)";
        case fs::file_type::character: return "a character device";
        case fs::file_type::block: return "a block device";
        case fs::file_type::socket: return "a socket";
        default: return "neither a file nor a directory";
    }
}

// The signal that came during an InterruptibleFile's life, 0 while none did: the handler only
// sets it (nothing else is safe in a signal handler).
volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_signal_during_save(int sig) { g_interrupted = sig; }

// The PATH.tmp of the InterruptibleFile being written ("" while none is), for
// remove_unfinished_save(), which another thread may call at any moment.
std::mutex g_saving_mutex;
std::string g_saving;

std::string interrupted_text() {
    return g_interrupted == SIGINT ? "interrupted (SIGINT)" : "interrupted (SIGTERM)";
}

// The type of PATH after symbolic links (not_found if there is nothing); throws only when it
// cannot be looked at (a folder on the way without permission).
fs::file_type type_of(const std::string& path, const std::string& what) {
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    if (ec && status.type() != fs::file_type::not_found)
        throw Error(prefix(what, path) + ": cannot access it (" + ec.message() + ")");
    return status.type();
}

}  // namespace

void require_regular_file(const std::string& path, const std::string& what) {
    const fs::file_type type = type_of(path, what);
    if (type == fs::file_type::not_found) throw MissingFile(prefix(what, path) + ": not found");
    if (type != fs::file_type::regular)
        throw Error(prefix(what, path) + ": is " + kind(type) + ", not a regular file");
}

std::ifstream open_regular_file(const std::string& path, const std::string& what) {
    require_regular_file(path, what);
    // Between the check and the open someone could put a FIFO there; we accept that race: the
    // point is a clear message for a wrong path, not a defence against an attacker.
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(prefix(what, path) + ": cannot open (" + std::strerror(errno) + ")");
    return in;
}

std::string read_regular_file(const std::string& path, const std::string& what, size_t max_bytes) {
    std::ifstream in = open_regular_file(path, what);
    std::string text;
    char chunk[1 << 16];
    // Read in chunks and stop past the limit, rather than trust the size stat() reported: the
    // file may grow while we read it.
    while (in.read(chunk, sizeof(chunk)) || in.gcount() > 0) {
        text.append(chunk, static_cast<size_t>(in.gcount()));
        if (text.size() > max_bytes)
            throw Error(prefix(what, path) + ": larger than " + std::to_string(max_bytes) +
                        " bytes, too large to be this kind of file");
    }
    if (in.bad()) throw Error(prefix(what, path) + ": read error");
    return text;
}

void require_directory(const std::string& path, const std::string& what) {
    const fs::file_type type = type_of(path, what);
    if (type == fs::file_type::not_found) throw MissingFile(prefix(what, path) + " does not exist");
    if (type != fs::file_type::directory)
        throw Error(prefix(what, path) + " is " + kind(type) + ", not a directory");
}

std::string replacing_tmp_path(const std::string& path) { return path + ".tmp"; }

FreeSpace free_space_for(const std::string& path) {
    const fs::path parent = fs::path(path).parent_path();
    const std::string dir = parent.empty() ? "." : parent.string();
    FreeSpace space;
    struct stat st = {};
    if (::stat(dir.c_str(), &st) == 0) space.device = static_cast<uint64_t>(st.st_dev);
    struct statvfs fs_info = {};
    if (::statvfs(dir.c_str(), &fs_info) == 0)
        space.bytes = static_cast<uint64_t>(fs_info.f_bavail) * static_cast<uint64_t>(fs_info.f_frsize);
    else
        space.bytes = std::numeric_limits<uint64_t>::max();  // unknown: the save reports what happens
    if (const char* fake = std::getenv("GPT_TEST_FREE_BYTES"); fake && *fake)
        space.bytes = std::strtoull(fake, nullptr, 10);
    return space;
}

std::string size_text(uint64_t bytes) {
    char buf[32];
    const double b = static_cast<double>(bytes);
    if (b < 1e3) std::snprintf(buf, sizeof(buf), "%.0f bytes", b);
    else if (b < 1e6) std::snprintf(buf, sizeof(buf), "%.0f kB", b / 1e3);
    else if (b < 1e9) std::snprintf(buf, sizeof(buf), "%.0f MB", b / 1e6);
    else std::snprintf(buf, sizeof(buf), "%.1f GB", b / 1e9);
    return buf;
}

void require_writable_path(const std::string& path, const std::string& what) {
    if (path.empty()) throw Error(what + ": the path is empty");
    const fs::file_type type = type_of(path, what);
    if (type != fs::file_type::not_found && type != fs::file_type::regular)
        throw Error(prefix(what, path) + ": is " + kind(type) + ", cannot write a file there");
    const fs::path parent = fs::path(path).parent_path();
    const std::string dir = parent.empty() ? "." : parent.string();
    const fs::file_type dir_type = type_of(dir, what);
    if (dir_type == fs::file_type::not_found) {
        std::error_code ec;
        fs::create_directories(dir, ec);
        if (ec) throw Error(prefix(what, path) + ": cannot create its directory " + dir + " (" + ec.message() + ")");
    } else if (dir_type != fs::file_type::directory) {
        throw Error(prefix(what, path) + ": " + dir + " is " + kind(dir_type) + ", not a directory");
    }
    // access(W_OK) is not enough: it says yes to root on /proc or a read-only mount, where the save
    // would fail after the whole run. So open the very file the save will write. Another process
    // checking the same path may make or remove it between our look and our open: look again.
    const std::string tmp = replacing_tmp_path(path);
    for (int attempt = 1;; ++attempt) {
        const bool again = attempt < 100;
        const fs::file_type tmp_type = type_of(tmp, what);
        if (tmp_type == fs::file_type::not_found) {
            const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
            if (fd < 0 && errno == EEXIST && again) continue;
            if (fd < 0) throw Error(prefix(what, path) + ": cannot create " + tmp + " (" + std::strerror(errno) + ")");
            ::close(fd);
            ::unlink(tmp.c_str());  // made here, so removed here
        } else if (tmp_type == fs::file_type::regular) {
            // Left by a save that was killed: opened as it is (no O_TRUNC), neither changed nor removed.
            const int fd = ::open(tmp.c_str(), O_WRONLY | O_CLOEXEC);
            if (fd < 0 && errno == ENOENT && again) continue;
            if (fd < 0) throw Error(prefix(what, path) + ": cannot write " + tmp + " (" + std::strerror(errno) + ")");
            ::close(fd);
        } else {
            throw Error(prefix(what, path) + ": " + tmp + " is " + kind(tmp_type) + ", cannot write the file through it");
        }
        return;
    }
}

ReplacingFile::ReplacingFile(const std::string& path, const std::string& what)
    : path_(path), tmp_(replacing_tmp_path(path)), what_(what) {
    require_writable_path(path, what);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error(prefix(what, path) + ": cannot create " + tmp_ + " (" + std::strerror(errno) + ")");
}

ReplacingFile::~ReplacingFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
}

void ReplacingFile::fail(const std::string& why) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    ::unlink(tmp_.c_str());
    throw Error(prefix(what_, path_) + " not written: " + why + " (" + path_ + " is left as it was)");
}

void ReplacingFile::write(const void* data, size_t bytes) {
    if (fd_ < 0) throw Error(prefix(what_, path_) + ": written after commit() or a failure");
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
        const ssize_t done = ::write(fd_, p, bytes);
        if (done < 0 && errno == EINTR) continue;  // a signal whose handler returned
        if (done <= 0) fail(std::string("write error (") + std::strerror(done < 0 ? errno : EIO) + ")");
        p += done;
        bytes -= static_cast<size_t>(done);
    }
}

void ReplacingFile::commit() {
    if (fd_ < 0) throw Error(prefix(what_, path_) + ": committed twice or after a failure");
    // The data must be on the disk before the rename makes it PATH.
    if (::fsync(fd_) != 0) fail(std::string("fsync failed (") + std::strerror(errno) + ")");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail(std::string("close failed (") + std::strerror(errno) + ")");
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
        fail("cannot rename " + tmp_ + " to it (" + std::strerror(errno) + ")");
    committed_ = true;
    // And the rename itself reaches the disk with its directory.
    const fs::path parent = fs::path(path_).parent_path();
    const int dir = ::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
        ::fsync(dir);
        ::close(dir);
    }
}

InterruptibleFile::Handlers::Handlers() : catcher((g_interrupted = 0, on_signal_during_save)) {}

InterruptibleFile::InterruptibleFile(const std::string& path, const std::string& what,
                                     std::function<void()> after_chunk)
    : file_(path, what), path_(path), what_(what), after_chunk_(std::move(after_chunk)) {
    std::lock_guard<std::mutex> lock(g_saving_mutex);
    g_saving = replacing_tmp_path(path);
}

InterruptibleFile::~InterruptibleFile() {
    std::lock_guard<std::mutex> lock(g_saving_mutex);
    g_saving.clear();
}

void remove_unfinished_save() {
    std::lock_guard<std::mutex> lock(g_saving_mutex);
    if (!g_saving.empty()) ::unlink(g_saving.c_str());  // after a commit's rename: nothing there, nothing done
}

int signal_during_save() { return g_interrupted; }

void InterruptibleFile::write(const void* data, size_t bytes) {
    const char* p = static_cast<const char*>(data);
    constexpr size_t kChunk = size_t(16) << 20;
    while (bytes > 0) {
        const size_t chunk = std::min(bytes, kChunk);
        file_.write(p, chunk);
        p += chunk;
        bytes -= chunk;
        if (after_chunk_) after_chunk_();
        if (g_interrupted) file_.fail(interrupted_text());
    }
}

void InterruptibleFile::commit() {
    file_.commit();
    if (g_interrupted) throw Error(prefix(what_, path_) + " saved, then " + interrupted_text());
}

}  // namespace gpt
