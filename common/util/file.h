// Files and folders the user names. Every reader of the project opens its files through here,
// so that each kind of wrong path gives the same one-line error instead of a hang or a crash:
//   - a FIFO (named pipe) blocks open() until someone writes to it: forever, in a script;
//   - a device such as /dev/zero never ends, and /dev/null looks like an empty file;
//   - a directory opens on Linux but every read of it fails.
// So the type is checked with stat() before anything is opened. Errors read
// "<what> <path>: <why>", e.g. "checkpoint run/x.ckpt: is a directory, not a file".
#pragma once
#include <signal.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <string_view>

#include "util/error.h"
#include "util/signals.h"

namespace gpt {

// The path does not exist at all: callers that can do without an optional file (the trainer's
// tokenizer, used only for text samples) catch this one and let every other error through.
struct MissingFile : Error {
    using Error::Error;
};

// Throws MissingFile if PATH does not exist, Error if it is anything but a regular file
// (symbolic links are followed).
void require_regular_file(const std::string& path, const std::string& what);

// require_regular_file(), then opens PATH for binary reading; throws if it cannot be opened
// (no permission, say).
std::ifstream open_regular_file(const std::string& path, const std::string& what);

// The whole content of a regular file; throws if it holds more than max_bytes (files that are
// read whole must be small: a wrong path must not fill the memory).
std::string read_regular_file(const std::string& path, const std::string& what,
                              size_t max_bytes = std::numeric_limits<size_t>::max());

// Throws MissingFile if PATH does not exist, Error if it is not a directory.
void require_directory(const std::string& path, const std::string& what);

// A file the program will write (through a temporary file renamed over it), checked before the
// work, not after it: throws if PATH exists and is not a regular file, if its directory is not a
// directory, or if the temporary file cannot be opened for writing there (the check creates it
// and removes it again; one left by an earlier save is only opened, and kept as it was). A
// missing directory is created.
void require_writable_path(const std::string& path, const std::string& what);

// Free bytes for an unprivileged writer on the file system that holds PATH's directory (PATH
// itself need not exist), and an id of that file system, so that two paths on the same one are
// counted together. GPT_TEST_FREE_BYTES=N makes every file system report N bytes free (a test's
// way to a full disk).
struct FreeSpace {
    uint64_t bytes = 0;
    uint64_t device = 0;
};
FreeSpace free_space_for(const std::string& path);

// "87 MB", "1.2 GB": a size for a message.
std::string size_text(uint64_t bytes);

// The temporary file a ReplacingFile writes before it becomes PATH: PATH.tmp.
std::string replacing_tmp_path(const std::string& path);

// A file that replaces PATH whole or not at all. It is written as PATH.tmp; commit() puts the
// data on the disk (fsync), renames PATH.tmp over PATH and syncs the directory, so that after a
// crash PATH is either the old file or the new one, never a part of it. Anything that ends it
// before commit() (a write error, an exception, a signal the caller turns into one) removes
// PATH.tmp and leaves PATH as it was. Errors read "<what> <path> not written: <why> (...)".
class ReplacingFile {
  public:
    ReplacingFile(const std::string& path, const std::string& what);  // require_writable_path() first
    ~ReplacingFile();
    ReplacingFile(const ReplacingFile&) = delete;
    ReplacingFile& operator=(const ReplacingFile&) = delete;

    void write(const void* data, size_t bytes);
    void write(std::string_view text) { write(text.data(), text.size()); }
    void commit();
    // Removes PATH.tmp and throws the error above with this reason.
    [[noreturn]] void fail(const std::string& why);

  private:
    std::string path_, tmp_, what_;
    int fd_ = -1;  // -1 once closed
    bool committed_ = false;
};

// A ReplacingFile for the large files a program saves while the user may stop it (checkpoints,
// model files): for its life, SIGINT and SIGTERM only mark it interrupted, and write() then
// fails it, so that PATH.tmp is removed and PATH stays as it was, where the default handlers
// would end the program with PATH.tmp left behind. The previous handlers come back when it
// ends. One at a time: the mark is one flag of the process.
class InterruptibleFile {
  public:
    // after_chunk, if set, runs after each chunk written (a test raises a signal there).
    InterruptibleFile(const std::string& path, const std::string& what, std::function<void()> after_chunk = nullptr);
    ~InterruptibleFile();
    InterruptibleFile(const InterruptibleFile&) = delete;
    InterruptibleFile& operator=(const InterruptibleFile&) = delete;

    void write(const void* data, size_t bytes);  // in chunks of 16 MiB, a signal checked after each
    // A signal during the final fsync leaves PATH whole and new, and still throws
    // "<what> <path> saved, then interrupted (SIGINT)": the program stops all the same.
    void commit();

  private:
    // Built before file_ and destroyed after it, so that a failure to create PATH.tmp puts the
    // previous handlers back too.
    struct Handlers {
        Handlers();
        CatchStopSignals catcher;
    };
    Handlers handlers_;
    ReplacingFile file_;
    std::string path_, what_;
    std::function<void()> after_chunk_;
};

// For a process that ends at once, from another thread, without unwinding (dist/watchdog.h):
// removes the PATH.tmp of the InterruptibleFile being written, if one is, so that nothing is left
// behind; and the SIGINT or SIGTERM that came while one was written (0 if none), which the
// interrupted save will report itself.
void remove_unfinished_save();
int signal_during_save();

}  // namespace gpt
