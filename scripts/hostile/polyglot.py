#!/usr/bin/env python3
"""Polyglot bundles: a store entry whose deflate stream gives one store to every zip tool (which inflate it as one
stream) and another to a reader that inflates it restart segment by restart segment (FORMAT.md 11.4), and the milder
forms of the same fault. Each is written from a good bundle whose deflated store has a restart index of at least
three segments (a store of 384 KiB or more written with one), in format version 2 (the index in the metadata) or 3
(in the store index entry, FORMAT.md 13.2: its records, hash tree and root are written again for each family, as a
lying writer would).

    polyglot.py BUNDLE FOLDER      writes FOLDER/<family>.mdz for each family below, and prints one JSON line each:
                                   {"name", "path", "zipTools": SHA-256 of what one-stream inflation gives (null when
                                   it fails), "zipToolsFile": those bytes, written beside (null likewise),
                                   "segmentWise": SHA-256 of what the restart segments give, "note"}

Families:
  polyglot            restart segment k-1 ends inside a stored block that runs on into segment k: one stream reads
                      segment k's first bytes as that block's data, segment-wise they are a deflate block of their
                      own. Metadata (digests, per-segment CRC-32s) describes the segment-wise store; the central
                      directory's CRC-32 is the one-stream store's, so `unzip -t` passes.
  polyglot-segment-crc  the same stream, the central directory's CRC-32 the segment-wise store's (`unzip -t` fails).
  wrong-crc           an honest stream whose central directory (and restart index) records another CRC-32.
  no-final-block      the last restart segment ends with a sync flush instead of the final block.
  final-mid-stream    a restart segment before the last ends with the final block.

Only python's standard library: the deflate bits are written here, by hand (RFC 1951), and the zip by struct.
"""
import hashlib, json, struct, sys, zipfile, zlib

STORE = 'StoreContent/persistentStore'
INDEX = 'StoreContent/persistentStore.index'
METADATA = 'DocumentMetadata.json'


def crc32c(data, table=[]):
    """CRC-32C (Castagnoli), reflected, as the store index records it for each restart segment's compressed bytes."""
    if not table:
        for n in range(256):
            c = n
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            table.append(c)
    crc = 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def read_index(index):
    """A version 3 store index's restart points as version 2's `deflateRestarts` spells them, and its digests."""
    interval, count, flags = struct.unpack_from('<QQI', index, 24)
    records = [index[64 + 48 * i:64 + 48 * (i + 1)] for i in range(count)]
    restarts = {'interval': interval, 'offsets': [struct.unpack_from('<Q', r, 32)[0] for r in records],
                'crc32s': ''.join('%08x' % struct.unpack_from('<I', r, 40)[0] for r in records)} if flags & 1 else None
    return restarts, [r[:32] for r in records]


def write_index(header, digests, offsets, crcs, compressed):
    """A version 3 store index (FORMAT.md 13.2) and its root, from its header and one record a segment."""
    records = b''.join(d + struct.pack('<QII', o, c, k) for d, o, c, k in zip(digests, offsets, crcs, compressed))

    def hashes(blob):
        return b''.join(hashlib.sha256(blob[i:i + 4096].ljust(4096, b'\0')).digest() for i in range(0, len(blob), 4096))
    level, tree = hashes(records), b''
    while len(level) > 32:
        level = level.ljust(-(-len(level) // 4096) * 4096, b'\0')
        tree += level
        level = hashes(level)
    top = level or hashlib.sha256(b'').digest()
    return header + records + tree, hashlib.sha256(header + top).hexdigest()


class Bits:
    """An LSB-first bit writer (RFC 1951, 3.1.1)."""
    def __init__(self):
        self.out, self.value, self.count = bytearray(), 0, 0

    def put(self, value, count):
        self.value |= value << self.count
        self.count += count
        while self.count >= 8:
            self.out.append(self.value & 0xFF)
            self.value >>= 8
            self.count -= 8

    def put_huffman(self, code, length):
        # Huffman codes are packed starting with their most significant bit.
        self.put(int('{:0{}b}'.format(code, length)[::-1], 2), length)

    def align(self):
        if self.count:
            self.put(0, 8 - self.count)

    def stored_header(self, length, final=False):
        self.put(1 if final else 0, 1)
        self.put(0, 2)
        self.align()
        self.put(length, 16)
        self.put(length ^ 0xFFFF, 16)


def fixed_literal(bits, byte):
    if byte < 144:
        bits.put_huffman(0x30 + byte, 8)
    else:
        bits.put_huffman(0x190 + byte - 144, 9)


LENGTH_BASE = [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195,
               227, 258]
LENGTH_EXTRA = [0] * 8 + [1] * 4 + [2] * 4 + [3] * 4 + [4] * 4 + [5] * 4 + [0]


def fixed_match_distance1(bits, length):
    """A match of `length` (3-258) at distance 1, in the fixed code."""
    index = max(i for i, base in enumerate(LENGTH_BASE) if base <= length)
    if length == 258:
        index = 28
    symbol = 257 + index
    if symbol < 280:
        bits.put_huffman(symbol - 256, 7)
    else:
        bits.put_huffman(0xC0 + symbol - 280, 8)
    bits.put(length - LENGTH_BASE[index], LENGTH_EXTRA[index])
    bits.put(0, 5)  # distance code 0: distance 1, no extra bits


def self_sized_block(data):
    """A fixed-Huffman block (not final) followed by an empty stored block, which inflates to a prefix of `data` exactly
    as long as its own compressed bytes; (compressed, prefix length). Literal bytes, then one run of the last literal
    repeated (a match at distance 1), tuned until the two lengths agree."""
    for literals in range(1, 200):
        run_byte = data[literals - 1]
        run = 0
        while literals + run < len(data) and data[literals + run] == run_byte and run < 258:
            run += 1
        for length in range(3, run + 1):
            bits = Bits()
            bits.put(0, 1)
            bits.put(1, 2)  # fixed Huffman
            for byte in data[:literals]:
                fixed_literal(bits, byte)
            fixed_match_distance1(bits, length)
            bits.put_huffman(0, 7)  # end of block
            bits.stored_header(0)
            if len(bits.out) == literals + length:
                return bytes(bits.out), literals + length
    return None


def stored_blocks(data, final=False, open_end=0):
    """`data` as stored blocks; the last one's length counts `open_end` more bytes than it holds here (they follow in
    the stream)."""
    bits = Bits()
    position = 0
    while True:
        take = min(0xFFFF, len(data) - position)
        last = position + take == len(data)
        if last and take + open_end > 0xFFFF:
            take -= take + open_end - 0xFFFF
            last = False
        bits.stored_header(take + (open_end if last else 0), final and last)
        bits.out += data[position:position + take]
        position += take
        if last:
            return bytes(bits.out)


def raw_entries(path):
    """Every entry of the zip at `path` in order: (ZipInfo, its raw compressed bytes)."""
    with zipfile.ZipFile(path) as archive, open(path, 'rb') as file:
        entries = []
        for info in archive.infolist():
            file.seek(info.header_offset)
            header = file.read(30)
            name_length, extra_length = struct.unpack('<HH', header[26:30])
            file.seek(info.header_offset + 30 + name_length + extra_length)
            entries.append((info, file.read(info.compress_size)))
        return entries


def write_zip(path, entries):
    """`entries`: (ZipInfo, method, raw bytes, crc, size), laid out with local headers, a directory, its end."""
    with open(path, 'wb') as file:
        directory = bytearray()
        for info, method, raw, crc, size in entries:
            offset = file.tell()
            name = info.filename.encode()
            dostime = (info.date_time[3] << 11) | (info.date_time[4] << 5) | (info.date_time[5] // 2)
            dosdate = ((info.date_time[0] - 1980) << 9) | (info.date_time[1] << 5) | info.date_time[2]
            file.write(struct.pack('<IHHHHHIIIHH', 0x04034B50, 20, 0, method, dostime, dosdate, crc, len(raw), size,
                                   len(name), 0) + name + raw)
            directory += struct.pack('<IHHHHHHIIIHHHHHII', 0x02014B50, 0x0314, 20, 0, method, dostime, dosdate, crc,
                                     len(raw), size, len(name), 0, 0, 0, 0, info.external_attr, offset) + name
        start = file.tell()
        file.write(directory)
        file.write(struct.pack('<IHHHHIIH', 0x06054B50, 0, 0, len(entries), len(entries), len(directory), start, 0))


def one_stream(raw):
    """What every zip tool gives for the stream: inflated as one stream (None when that fails or it does not end)."""
    inflater = zlib.decompressobj(-15)
    try:
        data = inflater.decompress(raw) + inflater.flush()
    except zlib.error:
        return None
    return data if inflater.eof and not inflater.unused_data else None


def segment_wise(raw, offsets):
    out = bytearray()
    for index, start in enumerate(offsets):
        end = offsets[index + 1] if index + 1 < len(offsets) else len(raw)
        inflater = zlib.decompressobj(-15)
        out += inflater.decompress(raw[start:end]) + inflater.flush()
    return bytes(out)


def sha(data):
    return None if data is None else hashlib.sha256(data).hexdigest()


def main():
    source, folder = sys.argv[1], sys.argv[2]
    entries = raw_entries(source)
    names = [info.filename for info, _ in entries]
    metadata = json.loads(zipfile.ZipFile(source).read(METADATA))
    store_info, store_raw = entries[names.index(STORE)]
    version3 = metadata.get('formatVersion', 1) >= 3
    if version3:
        index_bytes = zipfile.ZipFile(source).read(INDEX)
        restarts, digests = read_index(index_bytes)
    else:
        restarts = metadata['store'].get('deflateRestarts')
    if store_info.compress_type != zipfile.ZIP_DEFLATED or not restarts or len(restarts['offsets']) < 3:
        sys.exit('polyglot.py: the bundle needs a deflated store with a restart index of at least 3 segments')
    interval, offsets = restarts['interval'], restarts['offsets']
    store = one_stream(store_raw)
    pieces = [store_raw[offsets[i]:(offsets[i + 1] if i + 1 < len(offsets) else len(store_raw))]
              for i in range(len(offsets))]

    def segment(i):
        return store[i * interval:(i + 1) * interval]

    def emit(name, stream, new_offsets, entry_crc, index_crc=None, note=''):
        edited = json.loads(json.dumps(metadata))
        new_index = None
        if version3:
            # > The records name the new pieces: their offsets, and CRC-32Cs computed as an honest writer would.
            bounds = new_offsets + [len(stream)]
            crcs = [int(restarts['crc32s'][8 * i:8 * i + 8], 16) for i in range(len(new_offsets))]
            compressed = [crc32c(stream[bounds[i]:bounds[i + 1]]) for i in range(len(new_offsets))]
            new_index, root = write_index(index_bytes[:64], digests, new_offsets, crcs, compressed)
            index = edited['store']['index']
            index['root'] = root
        else:
            index = edited['store']['deflateRestarts']
            index['offsets'] = new_offsets
            index.pop('compressedCRC32Cs', None)  # optional; it would name the old pieces
        index['compressedSize'] = len(stream)
        index['crc32'] = entry_crc if index_crc is None else index_crc
        text = json.dumps(edited, sort_keys=True, indent=2).encode()
        out = []
        for info, raw in entries:
            if info.filename == STORE:
                out.append((info, 8, stream, entry_crc, len(store)))
            elif info.filename == INDEX:
                out.append((info, 0, new_index, zlib.crc32(new_index), len(new_index)))
            elif info.filename == METADATA:
                out.append((info, 0, text, zlib.crc32(text), len(text)))
            else:
                out.append((info, info.compress_type, raw, info.CRC, info.file_size))
        path = '%s/%s.mdz' % (folder, name)
        write_zip(path, out)
        seen = one_stream(stream)
        seen_path = None
        if seen is not None:
            seen_path = '%s/%s.zip-tools.sqlite' % (folder, name)
            with open(seen_path, 'wb') as file:
                file.write(seen)
        print(json.dumps({'name': name, 'path': path, 'zipTools': sha(seen), 'zipToolsFile': seen_path,
                          'segmentWise': sha(segment_wise(stream, new_offsets)), 'note': note}))

    def laid(new_pieces):
        stream, new_offsets = b'', []
        for piece in new_pieces:
            new_offsets.append(len(stream))
            stream += piece
        return stream, new_offsets

    # The polyglot: segment k's first bytes encode themselves at equal length, so both readings keep the sizes.
    made = None
    for k in range(1, len(offsets) - 1):
        found = self_sized_block(segment(k))
        if found:
            made = k, found
            break
    if made is None:
        sys.exit('polyglot.py: no restart segment of this store starts with bytes that can be encoded at their own size')
    k, (head, head_length) = made
    previous = segment(k - 1)
    before = stored_blocks(previous, open_end=len(head))  # its last block runs on over `head`
    after = head + stored_blocks(segment(k)[head_length:])
    stream, new_offsets = laid(pieces[:k - 1] + [before, after] + pieces[k + 1:])
    seen = one_stream(stream)
    hidden = segment_wise(stream, new_offsets)
    assert seen is not None and len(seen) == len(store) and hidden == store and seen != store
    emit('polyglot', stream, new_offsets, zlib.crc32(seen),
         note='zip tools read segment %d from byte %d as stored data; segment-wise it is the store the metadata describes' % (k, head_length))
    emit('polyglot-segment-crc', stream, new_offsets, zlib.crc32(store),
         note='the same stream; the central directory records the segment-wise CRC-32, so unzip -t fails')

    honest, honest_offsets = laid(pieces)
    emit('wrong-crc', honest, honest_offsets, zlib.crc32(store) ^ 0x5A5A5A5A,
         note='an honest stream; the central directory and the index record another CRC-32')

    last = len(offsets) - 1
    deflater = zlib.compressobj(6, zlib.DEFLATED, -15)
    unfinished = deflater.compress(segment(last)) + deflater.flush(zlib.Z_SYNC_FLUSH)
    stream, new_offsets = laid(pieces[:last] + [unfinished])
    emit('no-final-block', stream, new_offsets, zlib.crc32(store), note='the stream never ends: no final block')

    deflater = zlib.compressobj(6, zlib.DEFLATED, -15)
    finished = deflater.compress(segment(1)) + deflater.flush(zlib.Z_FINISH)
    stream, new_offsets = laid(pieces[:1] + [finished] + pieces[2:])
    emit('final-mid-stream', stream, new_offsets, zlib.crc32(store),
         note='restart segment 1 ends with the final block; zip tools stop there')


if __name__ == '__main__':
    main()
