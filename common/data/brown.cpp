// Tagged Brown corpus -> plain text (see brown.h for the input format).
#include "data/brown.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

#include "util/error.h"
#include "util/file.h"

namespace fs = std::filesystem;

namespace gpt {

namespace {

struct TaggedWord {
    std::string word;
    std::string tag;
};

// "The/at" -> {"The", "at"}. The tag follows the LAST slash: words such as "1-1/2/cd" contain
// slashes themselves. A token without a slash is kept whole.
TaggedWord split_tag(std::string_view token) {
    const size_t slash = token.rfind('/');
    if (slash == std::string_view::npos || slash == 0) return {std::string(token), ""};
    return {std::string(token.substr(0, slash)), std::string(token.substr(slash + 1))};
}

bool is_one_of(const std::string& word, std::initializer_list<const char*> options) {
    for (const char* option : options)
        if (word == option) return true;
    return false;
}

// Pieces that belong to the word before them: closing punctuation, and the second half of a
// contraction in case a text splits it off ("do" "n't", "John" "'s").
bool attaches_left(const std::string& word) {
    if (is_one_of(word, {",", ".", ";", ":", "?", "!", ")", "]", "}", "%"})) return true;
    std::string lower = word;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return is_one_of(lower, {"n't", "'s", "'re", "'ve", "'ll", "'d", "'m"});
}

// "12''", "1/2''": a number of inches.
bool ends_with_inch_mark(const std::string& word) {
    return word.size() >= 3 && word.compare(word.size() - 2, 2, "''") == 0 &&
           std::isdigit(static_cast<unsigned char>(word[word.size() - 3]));
}

// Pieces after which no space follows.
bool attaches_right(const std::string& word) { return is_one_of(word, {"(", "[", "{"}); }

// Joins the tagged tokens of one paragraph into a line of plain text.
class ParagraphWriter {
  public:
    void add(const TaggedWord& token) {
        std::string word = token.word;

        // The corpus doubles sentence punctuation other than the full stop when it ends a
        // sentence ("?/. ?/.", ";/. ;/."): keep one.
        if (token.tag == "." && word != "." && word == previous_.word && previous_.tag == ".")
            return;
        // A sentence that ends with an abbreviation gets its own full stop ("Jr./np ./."):
        // one full stop is what a reader expects.
        if (word == "." && !text_.empty() && text_.back() == '.') return;
        // Inches are written with two apostrophes (12''), and the corpus follows such a word
        // with a stray closing-quote token: drop it, and write the inch mark as ".
        if (word == "''" && ends_with_inch_mark(previous_.word)) return;
        previous_ = token;
        if (ends_with_inch_mark(word)) word = word.substr(0, word.size() - 2) + "\"";

        bool space_before = true;
        bool space_after = true;
        if (word == "``") {  // opening double quote
            word = "\"";
            space_after = false;
        } else if (word == "''") {  // closing double quote
            word = "\"";
            space_before = false;
        } else if (word == "'" || word == "`") {
            // A lone single quote opens or closes a quotation; the tag does not say which,
            // so alternate within the paragraph.
            word = "'";
            if (single_quote_open_) space_before = false;
            else space_after = false;
            single_quote_open_ = !single_quote_open_;
        } else if (attaches_left(word)) {
            space_before = false;
        } else if (attaches_right(word)) {
            space_after = false;
        }

        if (!text_.empty() && space_before && !glue_next_) text_ += ' ';
        text_ += word;
        glue_next_ = !space_after;
    }

    const std::string& text() const { return text_; }

  private:
    std::string text_;
    TaggedWord previous_;
    bool glue_next_ = false;          // the last piece opened a quote or bracket
    bool single_quote_open_ = false;
};

// A headline: not indented like a paragraph's first line, tagged as headline ("nn-hl"), and
// not ending like a sentence.
bool is_headline(std::string_view line, const std::vector<TaggedWord>& tokens) {
    if (line.empty() || line[0] == '\t' || tokens.back().tag == ".") return false;
    for (const TaggedWord& token : tokens)
        if (token.tag.find("-hl") != std::string::npos) return true;
    return false;
}

bool is_brown_file_name(const std::string& name) {
    return name.size() == 4 && name[0] == 'c' && name[1] >= 'a' && name[1] <= 'r' &&
           std::isdigit(static_cast<unsigned char>(name[2])) &&
           std::isdigit(static_cast<unsigned char>(name[3]));
}

}  // namespace

std::string brown_to_text(std::string_view tagged) {
    std::string document;
    ParagraphWriter paragraph;
    auto finish_paragraph = [&]() {
        if (paragraph.text().empty()) return;
        if (!document.empty()) document += "\n\n";
        document += paragraph.text();
        paragraph = ParagraphWriter();
    };

    // Blank lines separate paragraphs; the lines inside a paragraph are its sentences, one per
    // line, joined with a space. Newspaper headlines (tags ending in "-hl") sit on a line of
    // their own right above the story's first sentence; they become paragraphs of their own.
    size_t line_start = 0;
    while (line_start <= tagged.size()) {
        size_t line_end = tagged.find('\n', line_start);
        if (line_end == std::string_view::npos) line_end = tagged.size();
        const std::string_view line = tagged.substr(line_start, line_end - line_start);
        line_start = line_end + 1;

        std::vector<TaggedWord> tokens;
        for (size_t i = 0; i < line.size();) {
            while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
            const size_t start = i;
            while (i < line.size() && !std::isspace(static_cast<unsigned char>(line[i]))) ++i;
            if (i > start) tokens.push_back(split_tag(line.substr(start, i - start)));
        }
        if (tokens.empty()) {
            finish_paragraph();
            continue;
        }
        const bool headline = is_headline(line, tokens);
        if (headline) finish_paragraph();
        for (const TaggedWord& token : tokens) paragraph.add(token);
        if (headline) finish_paragraph();
    }
    finish_paragraph();
    return document;
}

std::vector<std::string> brown_files(const std::string& corpus_dir) {
    try {
        require_directory(corpus_dir, "Brown corpus directory");
    } catch (const MissingFile& e) {
        throw MissingFile(std::string(e.what()) + " (install it with: npm ci --prefix common/data)");
    }
    std::vector<std::string> paths;
    std::error_code ec;
    for (const fs::directory_entry& entry : fs::directory_iterator(corpus_dir, ec)) {
        if (!is_brown_file_name(entry.path().filename().string())) continue;
        require_regular_file(entry.path().string(), "Brown corpus file");  // not skipped in silence
        paths.push_back(entry.path().string());
    }
    if (ec) throw Error("Brown corpus directory " + corpus_dir + ": cannot list it (" + ec.message() + ")");
    if (paths.empty())
        throw Error("Brown corpus directory " + corpus_dir +
                    " holds no corpus files (ca01 ... cr09)");
    std::sort(paths.begin(), paths.end());
    return paths;
}

std::vector<std::string> read_brown_documents(const std::string& corpus_dir) {
    std::vector<std::string> documents;
    for (const std::string& path : brown_files(corpus_dir))
        documents.push_back(brown_to_text(read_regular_file(path, "Brown corpus file")));
    return documents;
}

}  // namespace gpt
