// Memory of an AssemblyScript volhost guest (ABI.md section 5).
//
// The guest owns two regions above the compiler's static data:
//
//   [base, base+inCap)   the request buffer volhost_buffer hands the host;
//   [base+inCap, top)    the call arena: every view, string and the encoded
//                        response of one call, bump-allocated.
//
// The host writes a request only after volhost_buffer and copies the
// response out before its next call (ABI.md section 5, step 4), so
// everything in the arena is dead when the next export starts: each export
// resets the arena (arenaReset) and nothing is ever freed. There is no
// garbage collector and no allocator bookkeeping, which is what keeps a call
// to a few hundred wasm instructions. Memory only grows when a
// request or response is larger than any before; a grow past the manifest's
// memory_pages traps, which the host reports as an oom fault.

/** Largest message either side accepts (ABI.md section 6: 4 MiB). */
export const MAX_MESSAGE_SIZE: i32 = 4 << 20;

/** Most items a repeated or map field may hold (ABI.md section 6). */
export const MAX_REPEATED: i32 = 10000;

// The first free byte after static data, 16-byte aligned. A function, not
// a global initialiser: a computed global would need a start function.
// @ts-ignore: decorator
@inline function heapBase(): usize { return (__heap_base + 15) & ~(<usize>15); }
let inCap: usize = 0;
let top: usize = 0; // set by arenaReset at the start of every export

// memEnd is the memory's size in bytes as last seen (it only grows).
let memEnd: usize = 0;

/** Makes sure [0, end) is inside memory, growing it if needed (traps when it cannot). */
// @ts-ignore: decorator
@inline export function ensure(end: usize): void {
  if (end > memEnd) grow(end);
}

function grow(end: usize): void {
  const have = <usize>memory.size() << 16;
  memEnd = have;
  if (end <= have) return;
  const pages = <i32>((end - have + 0xffff) >>> 16);
  if (memory.grow(pages) < 0) unreachable(); // past memory_pages: the host's oom
  memEnd = <usize>memory.size() << 16;
}

/**
 * volhost_buffer: room for a request of size bytes at the start of the
 * guest's regions; 0 (an ABI violation the host reports) for a size outside
 * 0..4 MiB.
 */
export function requestBuffer(size: i32): usize {
  if (size < 0 || size > MAX_MESSAGE_SIZE) return 0;
  if (<usize>size > inCap || inCap == 0) {
    // Grow geometrically so slowly growing requests rarely move the arena.
    let c = inCap << 1;
    if (c < <usize>size) c = <usize>size;
    if (c < 4096) c = 4096;
    inCap = c;
    ensure(heapBase() + inCap);
  }
  return heapBase();
}

/** The request buffer's address and capacity (the export checks a length against it). */
// @ts-ignore: decorator
@inline export function requestBase(): usize { return heapBase(); }
// @ts-ignore: decorator
@inline export function requestCap(): usize { return inCap; }

/** Starts a call: everything the previous call allocated is dropped. */
// @ts-ignore: decorator
@inline export function arenaReset(): void { top = heapBase() + inCap; }

/** Allocates n bytes (8-byte aligned) in the call arena. Not zeroed. */
export function alloc(n: usize): usize {
  const p = (top + 7) & ~(<usize>7);
  const end = p + n;
  ensure(end);
  top = end;
  return p;
}

/** Allocates n zeroed bytes in the call arena. */
export function allocZero(n: usize): usize {
  const p = alloc(n);
  memory.fill(p, 0, n);
  return p;
}

/**
 * Moves the arena's end to p (at or past arenaTop(), inside memory: an
 * encoder that wrote there after ensure).
 */
// @ts-ignore: decorator
@inline export function arenaCommit(p: usize): void { top = p; }

/** The arena's current end (text building appends here). */
export function arenaTop(): usize { return top; }

/** Appends one byte at the arena's end (text building). */
// @ts-ignore: decorator
@inline export function arenaPushByte(b: u8): void {
  ensure(top + 1);
  store<u8>(top, b);
  top++;
}

/** Reserves n bytes at the arena's end and returns their address (text building). */
export function arenaExtend(n: usize): usize {
  const p = top;
  ensure(p + n);
  top = p + n;
  return p;
}
