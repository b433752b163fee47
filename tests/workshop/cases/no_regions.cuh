// No exercise here: the copy is the file itself, byte for byte, including the odd characters
// that CMake lists treat specially: ; [ ] \ and a line continuation:
#define ADD(a, b) \
    ((a) + (b))
static const char* kText = "a;b[0]\\n";


// (two empty lines above, none at the end)