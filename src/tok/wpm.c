/*
 * wpm.c — WordPiece ("bert" vocabularies), as the reference GGUF tokenizer
 * implements it.
 *
 * Place in the flow: tok/, called by tok_encode for each raw text fragment.
 *
 * Pre-processing: each code point is replaced by the first code point of its
 * NFD decomposition (which strips accents), whitespace ends a word, NUL,
 * U+FFFD and control/format characters are dropped, punctuation, ASCII
 * symbols and CJK ideographs become one-character words, everything else is
 * lowercased and appended to the current word. Each word is prefixed with ▁
 * (the GGUF spelling of a word start; continuation pieces are stored without
 * "##") and split greedily into the longest vocabulary pieces from the left;
 * a word with any unmatched position becomes the unknown token.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"
#include "unicode.h"

static bool is_chinese(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* Greedy longest-match of one word (w[0..n), starting with ▁). */
static void wpm_word(const tokenizer *t, const char *w, int n, tok_vec *out) {
    int start = out->n;
    for (int i = 0; i < n;) {
        int j = MIN(n, i + t->max_str + 1);
        int32_t id = -1;
        for (; j > i; j--) {
            id = tok__find_n(t, w + i, (size_t)(j - i));
            if (id >= 0 && id < t->n_vocab) break;
            id = -1;
        }
        if (id < 0) {
            out->n = start; /* discard the whole word */
            break;
        }
        tok__vec_push(out, id);
        i = j;
    }
    if (out->n == start && t->unk >= 0) tok__vec_push(out, t->unk);
}

void tok__wpm_encode(const tokenizer *t, const char *text, size_t len, tok_vec *out) {
    char *w = xmalloc(len * 4 + 8); /* one word at a time: ▁ + lowercased chars */
    int n = 0;
    bool open = false; /* a word has content */
#define FLUSH()                                                                                                    \
    do {                                                                                                           \
        if (open) wpm_word(t, w, n, out);                                                                          \
        open = false;                                                                                              \
    } while (0)
    for (size_t i = 0; i < len;) {
        uint32_t c;
        i += (size_t)unicode_decode(text + i, len - i, &c);
        c = unicode_nfd_first(c);
        unsigned f = unicode_flags(c);
        if (f & UCF_SPACE) {
            FLUSH();
            continue;
        }
        if (c == 0 || c == UNICODE_REPLACEMENT || (f & UCF_OTHER)) continue;
        if (!open) {
            memcpy(w, "\xe2\x96\x81", 3);
            n = 3;
            open = true;
        }
        bool single = (f & UCF_PUNCT) || (c < 0x7F && (f & UCF_SYMBOL)) || is_chinese(c);
        if (single && n > 3) { /* finish the previous word first */
            wpm_word(t, w, n, out);
            n = 3;
        }
        n += utf8_encode(unicode_tolower(c), w + n);
        if (single) FLUSH();
    }
    FLUSH();
#undef FLUSH
    free(w);
}
