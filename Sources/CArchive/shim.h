#ifndef CARCHIVE_SHIM_H
#define CARCHIVE_SHIM_H

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>
#include <zlib.h>

// zlib's crc32 under a name that does not depend on zlib's uLong typedefs.
static inline unsigned int carchive_crc32(unsigned int crc, const void *bytes, unsigned int length) {
    return (unsigned int)crc32((uLong)crc, (const Bytef *)bytes, (uInt)length);
}

// File-type macros in archive_entry.h are casts (`(__LA_MODE_T)0100000`), which Swift cannot import.
static inline unsigned int carchive_ae_ifreg(void) { return (unsigned int)AE_IFREG; }
static inline unsigned int carchive_ae_ifdir(void) { return (unsigned int)AE_IFDIR; }
static inline unsigned int carchive_ae_iflnk(void) { return (unsigned int)AE_IFLNK; }
static inline unsigned int carchive_ae_ifmt(void) { return (unsigned int)AE_IFMT; }

#include <stdlib.h>

// How many bytes zlib's deflate makes of a sample at a level; 0 on failure. Used to store entries that would not shrink.
static inline unsigned long carchive_deflated_size(const void *bytes, unsigned long length, int level) {
    uLongf bound = compressBound((uLong)length);
    Bytef *out = (Bytef *)malloc(bound);
    if (out == NULL) return 0;
    int status = compress2(out, &bound, (const Bytef *)bytes, (uLong)length, level);
    free(out);
    return status == Z_OK ? (unsigned long)bound : 0;
}

#endif
