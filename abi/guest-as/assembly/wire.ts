// Protocol buffer wire format (proto3), reading and writing in guest memory.
//
// Reading follows abi/codec_gen.go: unknown fields of any wire type are skipped
// (ABI.md section 6, forward compatibility), and bad varints or lengths, a
// field number 0, a stray end-group, a reserved wire type, or a known field
// with another wire type fail the decode with one error naming the message
// and the field path (decodeError). The reader is a cursor over the request
// buffer held in module globals: one call is decoded at a time.

import { Bytes, bytesEqual, bytesOf, blen, bptr, eq, text, textBytes, textEnd, textStart, textU64 } from "./bytes";
import { alloc, allocZero, MAX_MESSAGE_SIZE, MAX_REPEATED } from "./mem";

/** Wire types. */
export const VARINT: u32 = 0;
export const FIXED64: u32 = 1;
export const LEN: u32 = 2;
export const SGROUP: u32 = 3;
export const EGROUP: u32 = 4;
export const FIXED32: u32 = 5;

// ---- reading ----

/** The read cursor. */
export let rp: usize = 0;
/** The error of the current decode, 0 when none. */
export let decodeError: Bytes = 0;

// The field path of the value being decoded, for the error message:
// pathNum[i] is a field number, pathItem[i] an item index (-1: singular).
const MAX_DEPTH = 8;
const pathNum = memory.data(MAX_DEPTH * 4);
const pathItem = memory.data(MAX_DEPTH * 4);
let depth = 0;
let messageName: string = "";

/** Starts decoding message name at [p, p+n). */
// @ts-ignore: decorator
@inline export function readStart(name: string, p: usize): void {
  rp = p;
  decodeError = 0;
  depth = 0;
  messageName = name;
}

/** Enters field num (item: index in a repeated field, -1 for a singular one). */
export function enter(num: u32, item: i32): void {
  if (depth < MAX_DEPTH) {
    store<u32>(pathNum + (<usize>depth << 2), num);
    store<i32>(pathItem + (<usize>depth << 2), item);
  }
  depth++;
}

/** Leaves the field entered last. */
export function leave(): void { depth--; }

/**
 * Records a decode error: "abi: malformed message: NAME: field N: item I:
 * ...: what" (the wording of abi/codec_gen.go). Only the first error counts.
 */
export function fail(num: u32, what: string, a: u64 = 0, b: u64 = 0): void {
  if (decodeError != 0) return;
  textStart();
  text("abi: malformed message: ");
  text(messageName);
  text(": ");
  const d = depth < MAX_DEPTH ? depth : MAX_DEPTH;
  for (let i = 0; i < d; i++) {
    text("field ");
    textU64(<u64>load<u32>(pathNum + (<usize>i << 2)));
    text(": ");
    const item = load<i32>(pathItem + (<usize>i << 2));
    if (item >= 0) {
      text("item ");
      textU64(<u64>item);
      text(": ");
    }
  }
  if (num != 0) {
    text("field ");
    textU64(<u64>num);
    text(": ");
  }
  if (what == "wire type") {
    text("wire type ");
    textU64(a);
    text(", want ");
    textU64(b);
  } else if (what == "too large") {
    textU64(a);
    text(" bytes exceeds the 4194304 byte limit");
  } else {
    text(what);
  }
  decodeError = textEnd();
}

/** Fails field num for a wire type other than want; true when typ is want. */
export function wantType(num: u32, typ: u32, want: u32): bool {
  if (typ == want) return true;
  fail(num, "wire type", <u64>typ, <u64>want);
  return false;
}

/** Reads a varint ending before end; fails (returns 0) when it is bad. */
// @ts-ignore: decorator
@inline export function readVarint(end: usize, num: u32): u64 {
  if (rp < end) {
    const c = load<u8>(rp);
    if (c < 0x80) { rp++; return <u64>c; }
    // Two bytes (128..16383: ages in ms below 16 s, counts) inline too.
    if (rp + 1 < end) {
      const c1 = load<u8>(rp + 1);
      if (c1 < 0x80) { rp += 2; return <u64>(c & 0x7f) | (<u64>c1 << 7); }
    }
  }
  return readVarintSlow(end, num);
}

function readVarintSlow(end: usize, num: u32): u64 {
  let x: u64 = 0;
  let shift: u64 = 0;
  for (let i = 0; i < 10; i++) {
    if (rp >= end) { fail(num, "unexpected EOF"); return 0; }
    const c = <u64>load<u8>(rp++);
    if (i == 9 && c > 1) { fail(num, "variable length integer overflow"); return 0; }
    x |= (c & 0x7f) << shift;
    if (c < 0x80) return x;
    shift += 7;
  }
  return x; // unreachable: the tenth byte ends it or fails
}

/**
 * Reads a tag (rp < end): field number << 3 | wire type. Returns 0 with an
 * error for a bad varint or field number 0 (protowire.ConsumeTag). Inline:
 * the one-byte tags of fields 1..15 cost no call.
 */
// @ts-ignore: decorator
@inline export function readTag(end: usize): u32 {
  const c = <u32>load<u8>(rp);
  if (c >= 8 && c < 0x80) { rp++; return c; }
  return readTagSlow(end);
}

function readTagSlow(end: usize): u32 {
  const x = readVarint(end, 0);
  if (decodeError != 0) return 0;
  if ((x >> 3) == 0 || (x >> 3) > 0x7fffffff) { fail(0, "tag: invalid field number"); return 0; }
  return <u32>((x >> 3) << 3) | <u32>(x & 7);
}

/**
 * Reads a length-delimited value (LEN) ending before end. Inline: a
 * one-byte length that fits costs no call.
 */
// @ts-ignore: decorator
@inline export function readLen(end: usize, num: u32): Bytes {
  if (rp < end) {
    const l = <usize>load<u8>(rp);
    if (l < 0x80 && l < end - rp) {
      const b = bytesOf(rp + 1, <i32>l);
      rp += l + 1;
      return b;
    }
  }
  return readLenSlow(end, num);
}

function readLenSlow(end: usize, num: u32): Bytes {
  let n: u64;
  if (rp < end && load<u8>(rp) < 0x80) n = <u64>load<u8>(rp++);
  else {
    n = readVarint(end, num);
    if (decodeError != 0) return 0;
  }
  if (n > <u64>(end - rp)) { fail(num, "unexpected EOF"); return 0; }
  const b = bytesOf(rp, <i32>n);
  rp += <usize>n;
  return b;
}

// ---- fast readers ----
//
// Whole-message decoders (messages.ts) read a message's fields in the order
// volhost's encoder writes them (abi/codec_gen.go: ascending field numbers)
// with these: each takes the field with the one-byte tag it is given at
// the cursor when it is there and well formed, and otherwise leaves the
// cursor where it is and returns 0, so an absent field costs one compare
// and no jump back. Whatever they leave (a field out of order, an unknown
// or repeated one, a long length, anything malformed) is read by the
// field loop as before, which gives the same values and the same errors:
// every field a fast reader takes is one the loop would have taken the
// same way. No loops and no calls: under a host's call timeout every loop
// header and function entry is a probe (ABI.md section 12), and a field
// loop's iteration per field was most of a request's decode
// (TestGuestCallWork/as counts the loop headers).

/**
 * String field tag (a one-byte tag of wire type LEN) at the cursor, with a
 * one-byte length inside [rp, e): its value, the cursor past it. Else 0
 * and the cursor unchanged.
 */
// @ts-ignore: decorator
@inline export function takeStr(e: usize, tag: u32): Bytes {
  const p = rp;
  if (p + 1 < e) {
    const h = <u32>load<u16>(p); // tag, length
    const l = <usize>(h >>> 8);
    if ((h & 0xff) == tag && l < 0x80 && l <= e - p - 2) {
      rp = p + 2 + l;
      return bytesOf(p + 2, <i32>l);
    }
  }
  return 0;
}

/**
 * Varint field tag at the cursor, at most 8 bytes long and ending inside
 * [rp, e): its value, the cursor past it. Else 0 and the cursor unchanged.
 * It reads the 8 bytes after the tag at once, which may go past e: the
 * whole-message decoders only use it where memory extends at least 9 bytes
 * past the message (see decodePolicyRequest).
 */
// @ts-ignore: decorator
@inline export function takeVarint(e: usize, tag: u32): u64 {
  const p = rp;
  if (p + 1 < e && <u32>load<u8>(p) == tag) {
    const x = load<u64>(p + 1);
    if ((x & 0x80) == 0) { rp = p + 2; return x & 0x7f; } // the usual one byte
    const stop = ~x & 0x8080808080808080; // the high bit of each byte that ends it
    if (stop != 0) {
      const k = <usize>(ctz<u64>(stop) >>> 3); // the last byte's index, 0..7
      if (k <= e - p - 2) {
        rp = p + 2 + k;
        // The 7 payload bits of bytes 0..k, packed: 14 bits per 16, 28 per 32, 56.
        let v = x & (<u64>0x7f7f7f7f7f7f7f7f >>> (<u64>(7 - k) << 3));
        v = (v & 0x007f007f007f007f) | ((v & 0x7f007f007f007f00) >>> 1);
        v = (v & 0x00003fff00003fff) | ((v & 0x3fff00003fff0000) >>> 2);
        return (v & 0x000000000fffffff) | ((v & 0x0fffffff00000000) >>> 4);
      }
    }
  }
  return 0;
}

/**
 * Message field tag at the cursor with a one- or two-byte length inside
 * [rp, e): the cursor at its body, and the body's end returned. Else 0
 * and the cursor unchanged.
 */
// @ts-ignore: decorator
@inline export function takeBody(e: usize, tag: u32): usize {
  const p = rp;
  if (p + 1 < e) {
    const h = <u32>load<u16>(p);
    if ((h & 0xff) == tag) {
      let l = <usize>(h >>> 8), q = p + 2;
      if (l >= 0x80) {
        if (q >= e) return 0;
        const c1 = <usize>load<u8>(q);
        if (c1 >= 0x80) return 0;
        l = (l & 0x7f) | (c1 << 7);
        q++;
      }
      if (l <= e - q) {
        rp = q;
        return q + l;
      }
    }
  }
  return 0;
}

/** Skips the value of an unknown field (any wire type, groups included). */
export function skipValue(end: usize, num: u32, typ: u32): void {
  switch (typ) {
    case VARINT: readVarint(end, num); return;
    case LEN: readLen(end, num); return;
    case FIXED32:
      if (end - rp < 4) { fail(num, "unexpected EOF"); return; }
      rp += 4;
      return;
    case FIXED64:
      if (end - rp < 8) { fail(num, "unexpected EOF"); return; }
      rp += 8;
      return;
    case SGROUP: skipGroup(end, num); return;
    case EGROUP: fail(num, "unknown field: parsing end-group marker"); return;
  }
  fail(num, "unknown field: cannot parse reserved wire type");
}

// skipGroup skips up to the end-group marker of group num, keeping the
// numbers of open groups on an arena stack (no recursion: a deep group
// nesting cannot exhaust the wasm stack).
function skipGroup(end: usize, num: u32): void {
  let stack = alloc(64 << 2), cap = 64, n = 1;
  store<u32>(stack, num);
  while (n > 0) {
    if (rp >= end) { fail(num, "unknown field: unexpected EOF"); return; }
    const tag = readTag(end);
    if (decodeError != 0) return;
    const f = tag >>> 3, t = tag & 7;
    if (t == EGROUP) {
      if (load<u32>(stack + (<usize>(n - 1) << 2)) != f) { fail(num, "unknown field: mismatching end group marker"); return; }
      n--;
    } else if (t == SGROUP) {
      if (n == cap) {
        const s2 = alloc(<usize>cap << 3);
        memory.copy(s2, stack, <usize>cap << 2);
        stack = s2;
        cap <<= 1;
      }
      store<u32>(stack + (<usize>n << 2), f);
      n++;
    } else {
      skipValue(end, f, t);
      if (decodeError != 0) return;
    }
  }
}

// ---- growable arrays in the arena ----

/**
 * A growable array of u64 items in the call arena: repeated fields (item
 * addresses, or Bytes) and map<string,string> fields (key, value pairs:
 * see mapSize, mapGet in messages.ts; a lookup takes the last entry with
 * the key, as proto does). Growing copies to a new block
 * twice the size; the old block stays dead in the arena until the call ends.
 */
@unmanaged
export class Vec {
  ptr: usize;
  len: i32;
  cap: i32;

  /** Item i. */
  // @ts-ignore: decorator
  @inline at(i: i32): u64 { return load<u64>(this.ptr + (<usize>i << 3)); }

  /** Appends x. */
  // @ts-ignore: decorator
  @inline push(x: u64): void {
    if (this.len == this.cap) this.grow();
    store<u64>(this.ptr + (<usize>this.len << 3), x);
    this.len++;
  }

  private grow(): void {
    const c = this.cap == 0 ? 4 : this.cap << 1;
    const p = alloc(<usize>c << 3);
    if (this.len > 0) memory.copy(p, this.ptr, <usize>this.len << 3);
    this.ptr = p;
    this.cap = c;
  }
}

// ---- writing ----

/** The write cursor. */
export let wp: usize = 0;

/** Starts writing at p. */
export function writeStart(p: usize): void { wp = p; }

/**
 * Copies n bytes from src to dst (not overlapping): up to 64 bytes with
 * 8-byte loads and stores, no loop and no memory.copy (a call out of the
 * guest's code into the host's memmove and a probe charge, ABI.md section
 * 12; a response's IDs and reasons are short); longer with memory.copy.
 */
// @ts-ignore: decorator
@inline export function copyShort(dst: usize, src: usize, n: usize): void {
  if (n >= 8) {
    if (n > 64) { memory.copy(dst, src, n); return; }
    // Whole words from the start, then the last word (overlapping).
    store<u64>(dst, load<u64>(src));
    if (n > 16) {
      store<u64>(dst + 8, load<u64>(src + 8));
      if (n > 24) {
        store<u64>(dst + 16, load<u64>(src + 16));
        if (n > 32) {
          store<u64>(dst + 24, load<u64>(src + 24));
          if (n > 40) {
            store<u64>(dst + 32, load<u64>(src + 32));
            if (n > 48) {
              store<u64>(dst + 40, load<u64>(src + 40));
              if (n > 56) store<u64>(dst + 48, load<u64>(src + 48));
            }
          }
        }
      }
    }
    store<u64>(dst + n - 8, load<u64>(src + n - 8));
  } else if (n >= 4) {
    store<u32>(dst, load<u32>(src));
    store<u32>(dst + n - 4, load<u32>(src + n - 4));
  } else if (n > 0) {
    store<u8>(dst, load<u8>(src));
    store<u8>(dst + (n >> 1), load<u8>(src + (n >> 1)));
    store<u8>(dst + n - 1, load<u8>(src + n - 1));
  }
}

/** Writes one byte. */
// @ts-ignore: decorator
@inline export function putByte(b: u32): void { store<u8>(wp++, <u8>b); }

/** Writes x as a varint. */
export function putVarint(x: u64): void {
  while (x >= 0x80) {
    store<u8>(wp++, <u8>(x | 0x80));
    x >>= 7;
  }
  store<u8>(wp++, <u8>x);
}

/**
 * Bytes of x as a varint: ceil(bits / 7) from the count of leading zeros,
 * without a loop (each iteration was a probe, four per decision; ABI.md
 * section 12).
 */
// @ts-ignore: decorator
@inline export function sizeVarint(x: u64): i32 {
  return <i32>(((<u64>63 - clz<u64>(x | 1)) * 9 + 73) >>> 6);
}

/** Writes a tag (fields 1..15 take one byte). */
// @ts-ignore: decorator
@inline export function putTag(num: u32, typ: u32): void { putVarint(<u64>(num << 3 | typ)); }

/** Size of a LEN field whose body is n bytes, tag included (fields 1..15). */
// @ts-ignore: decorator
@inline export function sizeLenField(n: i32): i32 { return 1 + sizeVarint(<u64>n) + n; }

/** Size of string field v, 0 when empty (proto3 omits it). */
// @ts-ignore: decorator
@inline export function sizeStr(v: Bytes): i32 { return v == 0 ? 0 : sizeLenField(blen(v)); }

/** Size of varint field v, 0 when 0. */
// @ts-ignore: decorator
@inline export function sizeU64(v: u64): i32 { return v == 0 ? 0 : 1 + sizeVarint(v); }

/** Writes string field num, nothing when v is empty. */
export function putStr(num: u32, v: Bytes): void {
  if (v == 0) return;
  putStrAlways(num, v);
}

/** Writes string field num even when empty (repeated items keep empty strings). */
export function putStrAlways(num: u32, v: Bytes): void {
  const n = blen(v);
  putTag(num, LEN);
  putVarint(<u64>n);
  if (n > 0) memory.copy(wp, bptr(v), <usize>n);
  wp += <usize>n;
}

/**
 * putStrAlways inline, nothing when v is empty: for the response encoders'
 * per-item strings, where a call per string is a sizeable share of a small
 * call (every function entry is instrumented by the host).
 */
// @ts-ignore: decorator
@inline export function putStrInline(num: u32, v: Bytes): void {
  const n = blen(v);
  if (n > 0) {
    putTag(num, LEN);
    putVarint(<u64>n);
    copyShort(wp, bptr(v), <usize>n);
    wp += <usize>n;
  }
}

/** Writes varint field num, nothing when v is 0. */
export function putU64(num: u32, v: u64): void {
  if (v == 0) return;
  putTag(num, VARINT);
  putVarint(v);
}

/** Size of a map<string,string> field's entries. */
export function sizeMap(m: Vec): i32 {
  let s = 0;
  for (let i = 0, n = m.len; i < n; i += 2) s += sizeLenField(sizeStr(m.at(i)) + sizeStr(m.at(i + 1)));
  return s;
}

/**
 * Writes a map<string,string> field's entries (a Vec of key, value pairs)
 * in their order; a repeated key is written each time, and the reader takes
 * the last, as from a map.
 */
export function putMap(num: u32, m: Vec): void {
  for (let i = 0, n = m.len; i < n; i += 2) {
    const k = m.at(i), v = m.at(i + 1);
    putTag(num, LEN);
    putVarint(<u64>(sizeStr(k) + sizeStr(v)));
    putStr(1, k);
    putStr(2, v);
  }
}

// ---- message helpers (the generated messages.ts uses these) ----

// ---- maps ----

/** Number of entries of map m on the wire (a repeated key counts each time). */
export function mapSize(m: Vec): i32 { return m.len >> 1; }
/** Key of entry i of map m. */
export function mapKey(m: Vec, i: i32): Bytes { return m.at(i << 1); }
/** Value of entry i of map m. */
export function mapValue(m: Vec, i: i32): Bytes { return m.at((i << 1) + 1); }

/** The value of key (an ASCII literal) in map m, "" when absent; the last entry wins. */
export function mapGet(m: Vec, key: string): Bytes {
  for (let i = mapSize(m) - 1; i >= 0; i--) {
    if (eq(mapKey(m, i), key)) return mapValue(m, i);
  }
  return 0;
}

/** The value of key in map m, "" when absent; the last entry wins. */
export function mapGetBytes(m: Vec, key: Bytes): Bytes {
  for (let i = mapSize(m) - 1; i >= 0; i--) {
    if (bytesEqual(mapKey(m, i), key)) return mapValue(m, i);
  }
  return 0;
}

export function newVec(): Vec { return changetype<Vec>(allocZero(offsetof<Vec>())); }

// newVecRoom is an empty Vec with room for n items, in one arena block and
// without a memory.fill (its fields are stored one by one).
// @ts-ignore: decorator
@inline export function newVecRoom(n: i32): Vec {
  const v = changetype<Vec>(alloc(16 + (<usize>n << 3)));
  v.ptr = changetype<usize>(v) + 16;
  v.len = 0;
  v.cap = n;
  return v;
}

// ---- decoding helpers ----

// str reads string field num of wire type typ, keeping old on error.
// @ts-ignore: decorator
@inline export function str(end: usize, num: u32, typ: u32, old: Bytes): Bytes {
  if (typ == LEN) return readLen(end, num);
  return strSlow(end, num, typ, old);
}

export function strSlow(end: usize, num: u32, typ: u32, old: Bytes): Bytes {
  if (!wantType(num, typ, LEN)) return old;
  return readLen(end, num);
}

// varint reads varint field num of wire type typ.
// @ts-ignore: decorator
@inline export function varint(end: usize, num: u32, typ: u32): u64 {
  if (typ == VARINT) return readVarint(end, num);
  return varintSlow(end, num, typ);
}

export function varintSlow(end: usize, num: u32, typ: u32): u64 {
  if (!wantType(num, typ, VARINT)) return 0;
  return readVarint(end, num);
}

// item checks that repeated field num may take one more item.
// @ts-ignore: decorator
@inline export function item(v: Vec, num: u32): bool {
  if (v.len < MAX_REPEATED) return true;
  fail(num, "more than 10000 items");
  return false;
}

// mapEntry decodes one map<string,string> entry of field num into m.
export function mapEntry(m: Vec, end: usize, num: u32, typ: u32): void {
  if (!wantType(num, typ, LEN)) return;
  if ((m.len >> 1) >= MAX_REPEATED) { fail(num, "more than 10000 entries"); return; }
  const body = readLen(end, num);
  if (decodeError != 0) return;
  const e = rp;
  rp = e - <usize><u32>body;
  let k: Bytes = 0, v: Bytes = 0;
  enter(num, -1);
  while (rp < e && decodeError == 0) {
    const tag = readTag(e);
    if (decodeError != 0) break;
    const f = tag >>> 3, t = tag & 7;
    if (f == 1) k = str(e, f, t, k);
    else if (f == 2) v = str(e, f, t, v);
    else skipValue(e, f, t);
  }
  leave();
  rp = e;
  m.push(k);
  m.push(v);
}

// body reads the length of message field num, leaves rp at the start of
// its body and returns the body's end (0: error).
// @ts-ignore: decorator
@inline export function body(end: usize, num: u32, typ: u32): usize {
  if (typ != LEN) {
    wantType(num, typ, LEN);
    return 0;
  }
  const b = readLen(end, num);
  if (decodeError != 0) return 0;
  const e = rp;
  rp = e - <usize><u32>b;
  return e;
}

// decodeStart begins decoding a top-level message of n bytes at p.
// @ts-ignore: decorator
@inline export function decodeStart(name: string, p: usize, n: i32): bool {
  readStart(name, p);
  if (n > MAX_MESSAGE_SIZE) {
    fail(0, "too large", <u64>n);
    return false;
  }
  return true;
}

// The items a request's repeated fields have room for before their Vecs
// grow: a Vec that grows copies its items (a memory.copy, ABI.md section
// 12), which the usual request should not pay.
export const ITEMS_ROOM = 16;

// putShortStr writes string field tag (one-byte tag, wire type LEN) of v
// at w, nothing when v is empty, and returns the end: a one-byte length
// inline, a longer one through putVarint.
// @ts-ignore: decorator
@inline export function putShortStr(w: usize, tag: u32, v: Bytes): usize {
  const n = <usize><u32>v;
  if (n == 0) return w;
  store<u8>(w, <u8>tag);
  if (n < 0x80) {
    store<u8>(w + 1, <u8>n);
    w += 2;
  } else {
    writeStart(w + 1);
    putVarint(<u64>n);
    w = wp;
  }
  copyShort(w, <usize>(v >>> 32), n);
  return w + n;
}

// putSmallVarint writes varint field tag of x at w, nothing when x is 0,
// and returns the end: a value under 128 inline.
// @ts-ignore: decorator
@inline export function putSmallVarint(w: usize, tag: u32, x: u64): usize {
  if (x == 0) return w;
  store<u8>(w, <u8>tag);
  if (x < 0x80) {
    store<u8>(w + 1, <u8>x);
    return w + 2;
  }
  writeStart(w + 1);
  putVarint(x);
  return wp;
}
