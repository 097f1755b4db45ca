/*
 * unicode.c — UTF-8 coding, code point classes, and the byte-level alphabet.
 *
 * Invariants: unicode_runs is sorted by `first` and starts at 0, so a binary
 * search always finds a run; decoding never reads past n and never accepts
 * overlong forms, surrogates or values above U+10FFFF (those bytes decode to
 * U+FFFD one at a time, which is what the reference tokenizers do).
 */
#include "unicode.h"

unsigned unicode_flags(uint32_t cp) {
    if (cp < 128) return unicode_flags_ascii[cp];
    if (cp > 0x10FFFF) return 0;
    int lo = 0, hi = unicode_n_runs - 1;
    while (lo < hi) { /* last run with first <= cp */
        int mid = (lo + hi + 1) / 2;
        if (unicode_runs[mid].first <= cp)
            lo = mid;
        else
            hi = mid - 1;
    }
    return unicode_runs[lo].flags;
}

uint32_t unicode_tolower(uint32_t cp) {
    if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    int lo = 0, hi = unicode_n_lower - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (unicode_lower[mid][0] == cp) return unicode_lower[mid][1];
        if (unicode_lower[mid][0] < cp)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return cp;
}

uint32_t unicode_nfd_first(uint32_t cp) {
    if (cp < 0xC0) return cp;
    int lo = 0, hi = unicode_n_nfd - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < unicode_nfd[mid][0])
            hi = mid - 1;
        else if (cp > unicode_nfd[mid][1])
            lo = mid + 1;
        else
            return unicode_nfd[mid][2];
    }
    return cp;
}

int unicode_decode(const char *s, size_t n, uint32_t *cp) {
    int len = utf8_decode(s, n, cp);
    if (len > 0) return len;
    *cp = UNICODE_REPLACEMENT;
    return 1;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes ('!'..'~', '¡'..'¬',
 * '®'..'ÿ') stand for themselves; the other 68 bytes take U+0100.. in byte
 * order. */
static int byte_is_printable(uint8_t b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t unicode_byte_to_cp(uint8_t b) {
    if (byte_is_printable(b)) return b;
    if (b <= 0x20) return 256u + b;            /* 33 bytes: 0x00..0x20 -> U+0100.. */
    if (b <= 0xA0) return 256u + 33 + (b - 0x7Fu); /* 34 bytes: 0x7F..0xA0          */
    return 256u + 67;                          /* 0xAD                             */
}

int unicode_cp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_is_printable((uint8_t)cp) ? (int)cp : -1;
    if (cp < 256 + 33) return (int)(cp - 256);
    if (cp < 256 + 67) return (int)(cp - 256 - 33 + 0x7F);
    if (cp == 256 + 67) return 0xAD;
    return -1;
}
