#ifndef CARCHIVE_SHIM_H
#define CARCHIVE_SHIM_H

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>
#include <zlib.h>
#include <isa-l/crc.h>
#include <isa-l/igzip_lib.h>
#include <stdint.h>
#include <stdlib.h>

// zip's CRC-32 (zlib's crc32, same values), computed by ISA-L with carry-less multiplication where the CPU has it.
static inline unsigned int carchive_crc32(unsigned int crc, const void *bytes, unsigned int length) {
    return (unsigned int)crc32_gzip_refl((uint32_t)crc, (const unsigned char *)bytes, (uint64_t)length);
}

// File-type macros in archive_entry.h are casts (`(__LA_MODE_T)0100000`), which Swift cannot import.
static inline unsigned int carchive_ae_ifreg(void) { return (unsigned int)AE_IFREG; }
static inline unsigned int carchive_ae_ifdir(void) { return (unsigned int)AE_IFDIR; }
static inline unsigned int carchive_ae_iflnk(void) { return (unsigned int)AE_IFLNK; }
static inline unsigned int carchive_ae_ifmt(void) { return (unsigned int)AE_IFMT; }


// Deflate levels 1-3 are ISA-L's (igzip): several times as fast as zlib's, output a few percent larger than zlib's
// level 6; levels 4-9 are zlib's. Both make ordinary deflate streams that every inflater reads.
static inline int carchive_deflate_is_fast(int level) { return level >= 1 && level <= ISAL_DEF_MAX_LEVEL; }

// ISA-L's working memory for a level: the "small" size, which deflates 128 KiB slices as small as the default does.
static inline unsigned int carchive_isal_level_buffer_size(int level) {
    switch (level) {
    case 1: return ISAL_DEF_LVL1_SMALL;
    case 2: return ISAL_DEF_LVL2_SMALL;
    case 3: return ISAL_DEF_LVL3_SMALL;
    default: return 0;
    }
}

// How many bytes a sample deflates to at ISA-L's level 1, in one shot; 0 on failure. Used to store entries that
// would not shrink.
static inline unsigned long carchive_deflated_size(const void *bytes, unsigned long length) {
    if (length > 0x0FFFFFFFul) return 0;  // a sample, never this large: the bound below stays in 32 bits
    struct isal_zstream *stream = (struct isal_zstream *)calloc(1, sizeof(struct isal_zstream));
    unsigned long capacity = length + (length >> 4) + 1024;
    unsigned char *out = (unsigned char *)malloc(capacity);
    unsigned long result = 0;
    if (stream != NULL && out != NULL) {
        isal_deflate_stateless_init(stream);
        stream->level = 1;
        stream->end_of_stream = 1;
        stream->next_in = (uint8_t *)(uintptr_t)bytes;
        stream->avail_in = (uint32_t)length;
        stream->next_out = out;
        stream->avail_out = (uint32_t)capacity;
        if (isal_deflate_stateless(stream) == COMP_OK) result = stream->total_out;
    }
    free(out);
    free(stream);
    return result;
}

// One slice of a raw deflate stream made on several threads (the scheme of pigz): each slice is compressed by its own
// stream, primed with the 32 KiB of input before it (or not, where the stream restarts), and ends with a sync flush
// (byte-aligned, not final) except the last, which ends the stream. The slices laid end to end are one valid deflate
// stream. The engine follows the level: ISA-L for 1-3, zlib for 4-9.
typedef struct carchive_deflater {
    int level;
    int hasStream;
    z_stream stream;                // zlib levels; for ISA-L levels, zlib level 1 where ISA-L's output did not fit
    struct isal_zstream *isal;      // ISA-L levels, with its level buffer
    unsigned char *levelBuffer;
} carchive_deflater;

static inline void carchive_deflater_free(carchive_deflater *deflater) {
    if (deflater == NULL) return;
    free(deflater->isal);
    free(deflater->levelBuffer);
    if (deflater->hasStream) deflateEnd(&deflater->stream);
    free(deflater);
}

static inline carchive_deflater *carchive_deflater_new(int level) {
    carchive_deflater *deflater = (carchive_deflater *)calloc(1, sizeof(carchive_deflater));
    if (deflater == NULL) return NULL;
    deflater->level = level;
    if (carchive_deflate_is_fast(level)) {
        deflater->isal = (struct isal_zstream *)calloc(1, sizeof(struct isal_zstream));
        deflater->levelBuffer = (unsigned char *)malloc(carchive_isal_level_buffer_size(level));
        if (deflater->isal == NULL || deflater->levelBuffer == NULL) {
            carchive_deflater_free(deflater);
            return NULL;
        }
        return deflater;
    }
    if (deflateInit2(&deflater->stream, level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
        free(deflater);
        return NULL;
    }
    deflater->hasStream = 1;
    return deflater;
}

// The output capacity that always holds one compressed slice of `length` bytes, its flush marker included.
static inline unsigned long carchive_deflate_slice_capacity(unsigned long length) {
    return length + (length >> 8) + 1024;
}

static inline long carchive_isal_deflate_slice(carchive_deflater *deflater, const void *dictionary,
                                               unsigned int dictionaryLength, const void *input,
                                               unsigned int inputLength, void *output, unsigned int outputCapacity,
                                               int last) {
    struct isal_zstream *stream = deflater->isal;
    isal_deflate_init(stream);
    stream->level = (uint32_t)deflater->level;
    stream->level_buf = deflater->levelBuffer;
    stream->level_buf_size = carchive_isal_level_buffer_size(deflater->level);
    if (dictionaryLength > 0
        && isal_deflate_set_dict(stream, (uint8_t *)(uintptr_t)dictionary, dictionaryLength) != COMP_OK) {
        return -1;
    }
    stream->next_in = (uint8_t *)(uintptr_t)input;
    stream->avail_in = inputLength;
    stream->next_out = (uint8_t *)output;
    stream->avail_out = outputCapacity;
    stream->end_of_stream = last ? 1 : 0;
    stream->flush = last ? NO_FLUSH : SYNC_FLUSH;
    if (isal_deflate(stream) != COMP_OK) return -1;
    // Done means every byte taken and the stream ended (last) or flushed to a new block header (others).
    int done = stream->avail_in == 0
        && (last ? stream->internal_state.state == ZSTATE_END : stream->internal_state.state == ZSTATE_NEW_HDR);
    if (!done) return -2;
    return (long)(outputCapacity - stream->avail_out);
}

// Compresses one slice; returns the compressed length, -1 when the engine refuses, -2 when the output did not fit.
static inline long carchive_deflate_slice(carchive_deflater *deflater, const void *dictionary,
                                          unsigned int dictionaryLength, const void *input, unsigned int inputLength,
                                          void *output, unsigned int outputCapacity, int last) {
    if (carchive_deflate_is_fast(deflater->level)) {
        long length = carchive_isal_deflate_slice(deflater, dictionary, dictionaryLength, input, inputLength, output,
                                                  outputCapacity, last);
        if (length != -2) return length;
        // ISA-L's output did not fit the capacity zlib's always fits: this slice goes through zlib's level 1.
        if (!deflater->hasStream) {
            if (deflateInit2(&deflater->stream, 1, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) return -1;
            deflater->hasStream = 1;
        }
    }
    z_stream *stream = &deflater->stream;
    if (deflateReset(stream) != Z_OK) return -1;
    if (dictionaryLength > 0 && deflateSetDictionary(stream, (const Bytef *)dictionary, dictionaryLength) != Z_OK) {
        return -1;
    }
    stream->next_in = (Bytef *)(uintptr_t)input;
    stream->avail_in = inputLength;
    stream->next_out = (Bytef *)output;
    stream->avail_out = outputCapacity;
    int status = deflate(stream, last ? Z_FINISH : Z_SYNC_FLUSH);
    if (last) {
        if (status != Z_STREAM_END) return status == Z_OK || status == Z_BUF_ERROR ? -2 : -1;
    } else {
        if (status != Z_OK && status != Z_BUF_ERROR) return -1;
        if (stream->avail_in != 0 || stream->avail_out == 0) return -2;  // a full buffer may hide an unfinished flush
    }
    return (long)(outputCapacity - stream->avail_out);
}

// zlib's crc32_combine: the CRC-32 of A followed by B from the CRCs of A and B and B's length.
static inline unsigned int carchive_crc32_combine(unsigned int crcA, unsigned int crcB, long lengthB) {
    return (unsigned int)crc32_combine((uLong)crcA, (uLong)crcB, (z_off_t)lengthB);
}

// One segment of a raw deflate stream, inflated on its own: a segment starts where the writer restarted deflate
// (no dictionary, a new block at a byte boundary) and, unless it is the last, ends at a block boundary on a byte
// boundary outside the final block, so inflating it alone gives exactly what inflating the whole stream gives there.
typedef struct carchive_inflater { z_stream stream; } carchive_inflater;

static inline carchive_inflater *carchive_inflater_new(void) {
    carchive_inflater *inflater = (carchive_inflater *)calloc(1, sizeof(carchive_inflater));
    if (inflater == NULL) return NULL;
    if (inflateInit2(&inflater->stream, -15) != Z_OK) {
        free(inflater);
        return NULL;
    }
    return inflater;
}

static inline void carchive_inflater_free(carchive_inflater *inflater) {
    if (inflater == NULL) return;
    inflateEnd(&inflater->stream);
    free(inflater);
}

// Inflates one segment into `output`. Returns the bytes produced, or
//   -1  the data is not valid deflate (or reaches back before the segment's start),
//   -2  it inflates to more than `outputCapacity` bytes,
//   -3  it does not end where a segment must: the last must end the stream with no byte after it; the others must
//       stop at a block boundary on a byte boundary, outside the final block, with every input byte used.
static inline long carchive_inflate_segment(carchive_inflater *inflater, const void *input, unsigned int inputLength,
                                            void *output, unsigned int outputCapacity, int last) {
    z_stream *stream = &inflater->stream;
    if (inflateReset(stream) != Z_OK) return -1;
    stream->next_in = (Bytef *)(uintptr_t)input;
    stream->avail_in = inputLength;
    stream->next_out = (Bytef *)output;
    stream->avail_out = outputCapacity;
    int status = Z_OK;
    // Z_BLOCK stops at every block boundary, so that data_type tells where the input ran out.
    while (stream->avail_in > 0) {
        status = inflate(stream, Z_BLOCK);
        if (status == Z_STREAM_END) break;
        if (status == Z_NEED_DICT || status == Z_DATA_ERROR || status == Z_MEM_ERROR || status == Z_STREAM_ERROR) {
            return -1;
        }
        // Headers and the end of a block need no output space, so a full buffer is an overflow only when zlib
        // can make no progress at all (inflate at TYPE with Z_BLOCK moves on: it skips the check on entry).
        if (status == Z_BUF_ERROR) return -2;
    }
    // Z_BLOCK stops at the end of the final block too; the next call (no input needed) reports the stream's end.
    if (status != Z_STREAM_END && (stream->data_type & 64) != 0 && (stream->data_type & 128) != 0) {
        status = inflate(stream, Z_BLOCK);
        if (status != Z_STREAM_END) return -1;
    }
    long produced = (long)(outputCapacity - stream->avail_out);
    if (status == Z_STREAM_END) {
        return (last && stream->avail_in == 0) ? produced : -3;
    }
    if (last) return -3;
    int atBoundary = (stream->data_type & 128) != 0 && (stream->data_type & 64) == 0 && (stream->data_type & 7) == 0;
    return atBoundary ? produced : -3;
}

// One zip entry's raw deflate stream, inflated by ISA-L as it is read (entries without restart points). The caller
// feeds the entry's compressed bytes in order and takes the output; the stream must end exactly at the entry's end.
typedef struct carchive_stream_inflater { struct inflate_state state; } carchive_stream_inflater;

static inline carchive_stream_inflater *carchive_stream_inflater_new(void) {
    carchive_stream_inflater *inflater = (carchive_stream_inflater *)malloc(sizeof(carchive_stream_inflater));
    if (inflater != NULL) isal_inflate_init(&inflater->state);
    return inflater;
}

static inline void carchive_stream_inflater_free(carchive_stream_inflater *inflater) { free(inflater); }

// Starts a new stream.
static inline void carchive_stream_inflater_reset(carchive_stream_inflater *inflater) {
    isal_inflate_reset(&inflater->state);
}

// Hands the next compressed bytes to the inflater; they must stay in place until it has taken them all.
static inline void carchive_stream_inflater_feed(carchive_stream_inflater *inflater, const void *input,
                                                 unsigned int length) {
    inflater->state.next_in = (uint8_t *)(uintptr_t)input;
    inflater->state.avail_in = length;
}

// Compressed bytes fed and not yet taken.
static inline unsigned int carchive_stream_inflater_pending(const carchive_stream_inflater *inflater) {
    return inflater->state.avail_in;
}

// Inflates into `output`; returns the bytes produced, or -1 when the data is not valid deflate. Sets *finished when
// the stream has ended and all of its output has been produced.
static inline long carchive_stream_inflate(carchive_stream_inflater *inflater, void *output,
                                           unsigned int outputCapacity, int *finished) {
    struct inflate_state *state = &inflater->state;
    state->next_out = (uint8_t *)output;
    state->avail_out = outputCapacity;
    int status = isal_inflate(state);
    if (status < 0) return -1;
    *finished = state->block_state == ISAL_BLOCK_FINISH;
    return (long)(outputCapacity - state->avail_out);
}

// After the stream has ended: whether any whole byte of the fed input lies beyond it (read ahead, or not taken).
static inline int carchive_stream_inflater_has_trailing_bytes(const carchive_stream_inflater *inflater) {
    const struct inflate_state *state = &inflater->state;
    return state->avail_in > 0 || state->read_in_length >= 8 || state->tmp_in_size > 0;
}

#if defined(__linux__)
// sync_file_range(2), declared by <fcntl.h> only under _GNU_SOURCE.
extern int sync_file_range(int fd, long long offset, long long nbytes, unsigned int flags);
#endif

// Starts writing a range of a file's dirty pages to disk without waiting for it (Linux; elsewhere nothing), so that a
// later fsync finds most of the file written. Returns 0, or -1 with errno.
static inline int carchive_start_writeback(int descriptor, long long offset, long long length) {
#if defined(__linux__)
    return sync_file_range(descriptor, offset, length, 2 /* SYNC_FILE_RANGE_WRITE */);
#else
    (void)descriptor; (void)offset; (void)length;
    return 0;
#endif
}

#if defined(__GLIBC__)
#include <malloc.h>
#endif

// Gives the heap's free pages back to the system; glibc keeps freed buffers of a few hundred KiB otherwise.
static inline void carchive_release_freed_memory(void) {
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
}

#endif
