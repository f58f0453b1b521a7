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

#endif
