#ifndef CARCHIVE_SHIM_H
#define CARCHIVE_SHIM_H

// The C libraries the archive layer uses, and the few of their macros Swift cannot import. No logic lives here: the
// codecs that drive ISA-L and zlib are Swift (Sources/ManagedDocument/Archive/Codecs.swift).
#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>
#include <sys/vfs.h>  // statfs(2): whether working copies are on a file system held in memory
#include <zlib.h>
#include <isa-l/crc.h>
#include <isa-l/igzip_lib.h>
#include <stdint.h>
#include <stdlib.h>
#include <malloc.h>

// File-type macros in archive_entry.h are casts (`(__LA_MODE_T)0100000`), which Swift cannot import.
static inline unsigned int carchive_ae_ifreg(void) { return (unsigned int)AE_IFREG; }
static inline unsigned int carchive_ae_ifdir(void) { return (unsigned int)AE_IFDIR; }

// ISA-L's working memory for a level, the "small" size (which deflates 128 KiB slices as small as the default
// does); its macros are sums Swift cannot import. 0 for a level ISA-L does not have.
static inline unsigned int carchive_isal_level_buffer_size(int level) {
    switch (level) {
    case 1: return ISAL_DEF_LVL1_SMALL;
    case 2: return ISAL_DEF_LVL2_SMALL;
    case 3: return ISAL_DEF_LVL3_SMALL;
    default: return 0;
    }
}

// sync_file_range(2), declared by <fcntl.h> only under _GNU_SOURCE.
extern int sync_file_range(int fd, long long offset, long long nbytes, unsigned int flags);

#endif
