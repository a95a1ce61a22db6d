// Sorted map keys, for messages that list a map's keys (Go's sort.Strings
// over a map's keys: bytewise order, each key once).

import { Bytes, bytesCompare } from "./bytes";
import { allocZero } from "./mem";
import { Vec } from "./wire";

/** The distinct keys of map m (a Vec of key, value pairs), sorted bytewise. */
export function sortedDistinctKeys(m: Vec): Vec {
  const out = changetype<Vec>(allocZero(offsetof<Vec>()));
  for (let i = 0, n = m.len >> 1; i < n; i++) {
    const k: Bytes = m.at(i << 1);
    // Insertion sort: config maps are small. Find k's place, skip a duplicate.
    let j = out.len;
    while (j > 0 && bytesCompare(out.at(j - 1), k) > 0) j--;
    if (j > 0 && bytesCompare(out.at(j - 1), k) == 0) continue;
    out.push(0);
    for (let t = out.len - 1; t > j; t--) store<u64>(out.ptr + (<usize>t << 3), out.at(t - 1));
    store<u64>(out.ptr + (<usize>j << 3), k);
  }
  return out;
}
