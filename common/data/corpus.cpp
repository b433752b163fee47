#include "data/corpus.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iostream>

#include "data/brown.h"
#include "data/tokenizer.h"
#include "util/error.h"
#include "util/file.h"
#include "util/json.h"

namespace gpt {

namespace {

// The longest line a JSON Lines input may hold: the JSON reader's own limit.
constexpr size_t kMaxLineBytes = Json::kMaxBytes;

std::string name_of(const CorpusInput& input) { return input.path == "-" ? "standard input" : input.path; }

}  // namespace

CorpusReader::CorpusReader(std::vector<CorpusInput> inputs, std::string text_field, size_t piece_bytes)
    : inputs_(std::move(inputs)), text_field_(std::move(text_field)), piece_bytes_(piece_bytes) {
    for (const CorpusInput& input : inputs_)
        if (input.path != "-") require_regular_file(input.path, "input");  // a typo fails at once
}

CorpusReader::~CorpusReader() = default;

bool CorpusReader::open_next_input() {
    file_.reset();
    in_ = nullptr;
    if (next_input_ == inputs_.size()) return false;
    input_ = &inputs_[next_input_++];
    pending_.clear();
    pending_at_ = 0;
    line_ = 0;
    document_open_ = false;
    input_done_ = false;
    if (input_->kind == CorpusInput::kBrownFile) return true;
    if (input_->path == "-") {
        in_ = &std::cin;
    } else {
        file_ = std::make_unique<std::ifstream>(open_regular_file(input_->path, "input"));
        in_ = file_.get();
    }
    return true;
}

void CorpusReader::read_block() {
    if (pending_at_ > 0) {  // drop what was handed out, so the buffer does not grow with the file
        pending_.erase(0, pending_at_);
        pending_at_ = 0;
    }
    const size_t old = pending_.size();
    pending_.resize(old + piece_bytes_);
    in_->read(&pending_[old], static_cast<std::streamsize>(piece_bytes_));
    const size_t got = static_cast<size_t>(in_->gcount());
    pending_.resize(old + got);
    bytes_read_ += static_cast<int64_t>(got);
    if (in_->bad()) throw Error("input " + name_of(*input_) + ": read error");
    if (got < piece_bytes_) input_done_ = true;
}

bool CorpusReader::next(Piece& piece) {
    for (;;) {
        if (!input_ && !open_next_input()) return false;
        bool got = false;
        switch (input_->kind) {
            case CorpusInput::kBrownFile:
                piece.text = brown_to_text(read_regular_file(input_->path, "input"));
                bytes_read_ += static_cast<int64_t>(piece.text.size());
                piece.starts_document = true;
                piece.where = input_->path;
                got = true;
                input_ = nullptr;  // one document per file
                break;
            case CorpusInput::kText: got = next_text_piece(piece); break;
            case CorpusInput::kJsonLines: got = next_json_line(piece); break;
        }
        if (got) {
            if (piece.starts_document) ++documents_;
            return true;
        }
        input_ = nullptr;
    }
}

bool CorpusReader::next_text_piece(Piece& piece) {
    while (!input_done_ && pending_.size() - pending_at_ < piece_bytes_) read_block();
    // Every text input is one document, an empty one too.
    if (document_open_ && pending_at_ == pending_.size()) return false;
    // Cut at the last safe place of what is buffered; with none, read on (a text with no space or
    // newline for megabytes is read until one comes, or whole).
    size_t cut = std::string::npos;
    size_t from = pending_at_ + 1;
    while (!input_done_ && (cut = last_safe_cut(pending_, from)) == std::string::npos) {
        const size_t kept = pending_.size() - pending_at_;
        read_block();  // moves the kept bytes to the front
        from = std::max<size_t>(kept, 1);
    }
    const size_t end = cut == std::string::npos ? pending_.size() : cut;
    piece.text.assign(pending_, pending_at_, end - pending_at_);
    pending_at_ = end;
    piece.starts_document = !document_open_;
    piece.where = name_of(*input_);
    document_open_ = true;
    return true;
}

bool CorpusReader::next_json_line(Piece& piece) {
    for (;;) {
        size_t searched = pending_at_;
        size_t newline;
        while ((newline = pending_.find('\n', searched)) == std::string::npos && !input_done_) {
            if (pending_.size() - pending_at_ > kMaxLineBytes) break;
            const size_t kept = pending_.size() - pending_at_;
            read_block();
            searched = pending_at_ + kept;
        }
        const size_t end = newline == std::string::npos ? pending_.size() : newline;
        if (end == pending_at_ && newline == std::string::npos) return false;  // the end of the input
        ++line_;
        const std::string where = name_of(*input_) + ":" + std::to_string(line_);
        if (end - pending_at_ - (end > pending_at_ && pending_[end - 1] == '\r') > kMaxLineBytes)
            throw Error(where + ": a line of more than " + std::to_string(kMaxLineBytes >> 20) +
                        " MB; is this JSON Lines (one JSON object per line)?");
        std::string_view line(pending_.data() + pending_at_, end - pending_at_);
        pending_at_ = newline == std::string::npos ? end : end + 1;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.find_first_not_of(" \t") == std::string_view::npos) continue;  // blank lines separate nothing
        Json doc;
        try {
            doc = Json::parse(line);
        } catch (const Error& e) {
            throw Error(where + ": " + e.what());
        }
        if (doc.kind != Json::Object) throw Error(where + ": not a JSON object (JSON Lines holds one per line)");
        if (!doc.has(text_field_))
            throw Error(where + ": no field \"" + text_field_ + "\" (name the text's field with --text-field)");
        const Json& text = doc[text_field_];
        if (text.kind != Json::String) throw Error(where + ": field \"" + text_field_ + "\" is not a string");
        piece.text = text.string;
        piece.starts_document = true;
        piece.where = where;
        return true;
    }
}

bool starts_like_json_lines(const std::string& path) {
    std::ifstream in = open_regular_file(path, "input");
    std::string head(4096, '\0');  // enough for the white space before a first line
    in.read(&head[0], static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<size_t>(in.gcount()));
    size_t at = head.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
    at = head.find_first_not_of(" \t\r\n", at);
    if (at == std::string::npos || head[at] != '{') return false;
    at = head.find_first_not_of(" \t", at + 1);
    return at != std::string::npos && head[at] == '"';
}

}  // namespace gpt
