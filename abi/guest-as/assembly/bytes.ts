// Byte strings and text building without the AssemblyScript runtime.
//
// AssemblyScript strings are UTF-16 objects on a managed heap; a volhost
// guest's strings are UTF-8 bytes of the request. So the SDK never makes an
// AS string at run time: a string field is a Bytes, a pointer and a length
// packed into one u64 (a value, no allocation), pointing into the request
// buffer or the call arena. AS string literals (ASCII) are only read, to
// compare or to copy into the arena.

import { alloc, arenaExtend, arenaPushByte, arenaTop } from "./mem";

/** A byte string: address << 32 | length. 0 is the empty string. */
export type Bytes = u64;

/** Packs an address and a length into a Bytes. */
// @ts-ignore: decorator
@inline export function bytesOf(ptr: usize, len: i32): Bytes {
  return len == 0 ? 0 : (<u64>ptr << 32) | <u64><u32>len;
}

/** The address of b's first byte. */
// @ts-ignore: decorator
@inline export function bptr(b: Bytes): usize { return <usize>(b >>> 32); }

/** The length of b in bytes. */
// @ts-ignore: decorator
@inline export function blen(b: Bytes): i32 { return <i32><u32>b; }

/** The byte at i (no bounds check). */
// @ts-ignore: decorator
@inline export function byteAt(b: Bytes, i: i32): u8 { return load<u8>(bptr(b) + <usize>i); }

/**
 * Reports whether a and b hold the same bytes. Inline, and without a loop
 * up to 16 bytes (the IDs of most requests): a call and each loop
 * iteration are a probe under the host's call timeout (ABI.md section 12),
 * and memory.compare was a loop over bytes.
 */
// @ts-ignore: decorator
@inline export function bytesEqual(a: Bytes, b: Bytes): bool {
  const n = <usize>blen(a);
  if (n != <usize>blen(b)) return false;
  const p = bptr(a), q = bptr(b);
  if (n > 16) return longEqual(p, q, n);
  if (n >= 8) return load<u64>(p) == load<u64>(q) && load<u64>(p + n - 8) == load<u64>(q + n - 8);
  if (n >= 4) return load<u32>(p) == load<u32>(q) && load<u32>(p + n - 4) == load<u32>(q + n - 4);
  // 0 to 3 bytes: the first, middle and last cover them all.
  return n == 0 || (load<u8>(p) == load<u8>(q) && load<u8>(p + (n >> 1)) == load<u8>(q + (n >> 1)) &&
    load<u8>(p + n - 1) == load<u8>(q + n - 1));
}

// longEqual compares n > 16 bytes at p and q, 8 at a time, the last 8
// overlapping.
function longEqual(p: usize, q: usize, n: usize): bool {
  for (let i: usize = 0; i + 8 < n; i += 8) {
    if (load<u64>(p + i) != load<u64>(q + i)) return false;
  }
  return load<u64>(p + n - 8) == load<u64>(q + n - 8);
}

/** Compares a and b bytewise: negative, 0 or positive (Go's strings.Compare). */
export function bytesCompare(a: Bytes, b: Bytes): i32 {
  const na = blen(a), nb = blen(b);
  const n = na < nb ? na : nb;
  if (n > 0) {
    const c = memory.compare(bptr(a), bptr(b), <usize>n);
    if (c != 0) return c;
  }
  return na - nb;
}

/**
 * Reports whether b holds exactly the ASCII literal s: the lengths, then
 * the bytes against s's cached copy (see lit) with bytesEqual, so no loop
 * over the characters for up to 16 of them. Inline when s is in its home
 * slot of the literal cache (see bytesEqual for why). It never allocates
 * in the arena (safe while a text is being built): with the cache full it
 * compares the characters.
 */
// @ts-ignore: decorator
@inline export function eq(b: Bytes, s: string): bool {
  if (blen(b) != s.length) return false;
  const q = changetype<usize>(s);
  const slot = <usize>((<u32>q * 0x9e3779b1) >>> 24); // litCached's first probe
  if (load<u32>(litKeys + (slot << 2)) == <u32>q) return bytesEqual(b, load<u64>(litVals + (slot << 3)));
  return eqSlow(b, s);
}

// eqSlow is eq past the literal's home slot: the cache's other probes and
// the first conversion, or the characters one by one when the cache is
// full. The lengths are equal.
function eqSlow(b: Bytes, s: string): bool {
  const c = litCached(s);
  if (c != 0) return bytesEqual(b, c);
  const n = s.length;
  const p = bptr(b), q = changetype<usize>(s);
  for (let i = 0; i < n; i++) {
    if (<u32>load<u8>(p + <usize>i) != <u32>load<u16>(q + (<usize>i << 1))) return false;
  }
  return true;
}

/** Reports whether b ends with the ASCII literal s. */
export function hasSuffix(b: Bytes, s: string): bool {
  const n = s.length, m = blen(b);
  if (m < n) return false;
  return eq(bytesOf(bptr(b) + <usize>(m - n), n), s);
}

// copyAscii writes the n UTF-16 code units at q as bytes at p.
function copyAscii(p: usize, q: usize, n: i32): void {
  for (let i = 0; i < n; i++) store<u8>(p + <usize>i, <u8>load<u16>(q + (<usize>i << 1)));
}

// The literal cache: LIT_SLOTS (literal address, Bytes) pairs, open
// addressing by address, and LIT_BYTES of static room for their bytes. It
// outlives the call arena, so each literal is converted once per instance.
const LIT_SLOTS = 256;
const LIT_BYTES = 8192;
const litKeys = memory.data(LIT_SLOTS * 4);
const litVals = memory.data(LIT_SLOTS * 8);
const litData = memory.data(LIT_BYTES);
let litUsed: usize = 0;

// litCached is the ASCII literal s from the cache, converting it on first
// use; 0 when s is empty or the cache is full.
function litCached(s: string): Bytes {
  const q = changetype<usize>(s);
  const h = (<u32>q * 0x9e3779b1) >>> 24; // 8 bits: LIT_SLOTS
  for (let k: u32 = 0; k < <u32>LIT_SLOTS; k++) {
    const slot = <usize>((h + k) & (LIT_SLOTS - 1));
    const key = load<u32>(litKeys + (slot << 2));
    if (key == <u32>q) return load<u64>(litVals + (slot << 3));
    if (key != 0) continue;
    const n = s.length;
    if (n == 0 || litUsed + <usize>n > <usize>LIT_BYTES) return 0;
    const p = litData + litUsed;
    litUsed += <usize>n;
    copyAscii(p, q, n);
    const b = bytesOf(p, n);
    store<u32>(litKeys + (slot << 2), <u32>q);
    store<u64>(litVals + (slot << 3), b);
    return b;
  }
  return 0;
}

/**
 * The ASCII literal s as Bytes. The first use in an instance copies it to a
 * static cache; later uses are a lookup. When the cache is full it is copied
 * into the call arena instead. Inline: a literal found in its home slot (the
 * usual case once converted) costs no call, where it cost two (each call
 * is an instrumented function entry in the host; TestGuestCallWork/as).
 */
// @ts-ignore: decorator
@inline export function lit(s: string): Bytes {
  const q = changetype<usize>(s);
  const slot = <usize>((<u32>q * 0x9e3779b1) >>> 24); // litCached's first probe
  if (load<u32>(litKeys + (slot << 2)) == <u32>q) return load<u64>(litVals + (slot << 3));
  return litSlow(s);
}

// litSlow is lit past the home slot: the cache's other probes, the first
// conversion, or a copy into the arena when the cache is full.
function litSlow(s: string): Bytes {
  const b = litCached(s);
  if (b != 0 || s.length == 0) return b;
  const n = s.length;
  const p = alloc(<usize>n);
  copyAscii(p, changetype<usize>(s), n);
  return bytesOf(p, n);
}

// ---- text building ----
//
// One text at a time is built at the arena's end: textStart, any number of
// appends, textEnd. Nothing else may allocate in between.

let textBegin: usize = 0;

/** Starts a text at the arena's end. */
export function textStart(): void { textBegin = arenaTop(); }

/** Ends the text started by textStart and returns it. */
export function textEnd(): Bytes { return bytesOf(textBegin, <i32>(arenaTop() - textBegin)); }

/** Appends the ASCII literal s. */
export function text(s: string): void {
  const b = litCached(s);
  if (b != 0) textBytes(b);
  else copyAscii(arenaExtend(<usize>s.length), changetype<usize>(s), s.length);
}

/** Appends the bytes of b. */
export function textBytes(b: Bytes): void {
  const n = blen(b);
  if (n > 0) memory.copy(arenaExtend(<usize>n), bptr(b), <usize>n);
}

/** Appends n in decimal. */
export function textU64(n: u64): void {
  if (n >= 10) textU64(n / 10);
  arenaPushByte(<u8>(48 + <u32>(n % 10)));
}

const HEX = "0123456789abcdef";

function textHex(x: u32, digits: i32): void {
  for (let i = digits - 1; i >= 0; i--) {
    arenaPushByte(<u8>HEX.charCodeAt((x >>> (<u32>i << 2)) & 15));
  }
}

/**
 * Appends b quoted as Go's %q (strconv.Quote) quotes a string: printable
 * ASCII as is, \" and \\, the C escapes, other control bytes and invalid
 * UTF-8 bytes as \xHH. Valid non-ASCII runes are kept except the ones Go
 * escapes that are common in practice (C1 controls, no-break and other
 * spaces, soft hyphen, format characters, BOM), written as \uHHHH; Go also
 * escapes unassigned code points, which this does not know.
 */
export function textQuote(b: Bytes): void {
  arenaPushByte(0x22);
  const n = blen(b);
  let i = 0;
  while (i < n) {
    const c = <u32>byteAt(b, i);
    if (c < 0x80) {
      i++;
      if (c == 0x22 || c == 0x5c) { arenaPushByte(0x5c); arenaPushByte(<u8>c); continue; }
      if (c >= 0x20 && c < 0x7f) { arenaPushByte(<u8>c); continue; }
      arenaPushByte(0x5c);
      switch (c) {
        case 7: arenaPushByte(0x61); break; // \a
        case 8: arenaPushByte(0x62); break; // \b
        case 12: arenaPushByte(0x66); break; // \f
        case 10: arenaPushByte(0x6e); break; // \n
        case 13: arenaPushByte(0x72); break; // \r
        case 9: arenaPushByte(0x74); break; // \t
        case 11: arenaPushByte(0x76); break; // \v
        default: arenaPushByte(0x78); textHex(c, 2); // \xHH
      }
      continue;
    }
    const size = utf8Size(b, i);
    if (size == 0) { // invalid: Go writes the byte as \xHH
      arenaPushByte(0x5c); arenaPushByte(0x78); textHex(c, 2);
      i++;
      continue;
    }
    const r = decodeRune(b, i, size);
    if (quotedRune(r)) {
      arenaPushByte(0x5c);
      if (r < 0x10000) { arenaPushByte(0x75); textHex(r, 4); } else { arenaPushByte(0x55); textHex(r, 8); }
    } else {
      for (let k = 0; k < size; k++) arenaPushByte(byteAt(b, i + k));
    }
    i += size;
  }
  arenaPushByte(0x22);
}

// utf8Size is the length of the valid UTF-8 sequence at b[i] (a byte >=
// 0x80), or 0 when it is not one (Go's utf8.DecodeRune rules: no overlong
// forms, no surrogates, nothing past U+10FFFF).
function utf8Size(b: Bytes, i: i32): i32 {
  const n = blen(b);
  const c0 = <u32>byteAt(b, i);
  let size = 0, lo: u32 = 0x80, hi: u32 = 0xbf;
  if (c0 >= 0xc2 && c0 <= 0xdf) size = 2;
  else if (c0 >= 0xe0 && c0 <= 0xef) {
    size = 3;
    if (c0 == 0xe0) lo = 0xa0; else if (c0 == 0xed) hi = 0x9f;
  } else if (c0 >= 0xf0 && c0 <= 0xf4) {
    size = 4;
    if (c0 == 0xf0) lo = 0x90; else if (c0 == 0xf4) hi = 0x8f;
  } else return 0;
  if (i + size > n) return 0;
  const c1 = <u32>byteAt(b, i + 1);
  if (c1 < lo || c1 > hi) return 0;
  for (let k = 2; k < size; k++) {
    const ck = <u32>byteAt(b, i + k);
    if (ck < 0x80 || ck > 0xbf) return 0;
  }
  return size;
}

function decodeRune(b: Bytes, i: i32, size: i32): u32 {
  const c0 = <u32>byteAt(b, i);
  let r: u32 = size == 2 ? c0 & 0x1f : size == 3 ? c0 & 0x0f : c0 & 0x07;
  for (let k = 1; k < size; k++) r = (r << 6) | (<u32>byteAt(b, i + k) & 0x3f);
  return r;
}

// quotedRune: the non-ASCII runes strconv.IsPrint rejects that are not
// unassigned (see textQuote).
function quotedRune(r: u32): bool {
  return r < 0xa0 || r == 0xa0 || r == 0xad || (r >= 0x2000 && r <= 0x200f) ||
    (r >= 0x2028 && r <= 0x202f) || (r >= 0x205f && r <= 0x206f) || r == 0x3000 ||
    r == 0xfeff || (r >= 0xfff9 && r <= 0xfffb) || r == 0x1680 || r == 0x180e ||
    (r >= 0xe000 && r <= 0xf8ff) || (r >= 0xf0000);
}
