//! torch CPU `topk(largest=True)` emulation (spec §12.6, §19.3).
//!
//! torch CPU builds a vector of `(value, index)` pairs in index order and runs libstdc++ on it
//! with the comparator `precedes(a, b) = (isnan(a) && !isnan(b)) || a > b`: `std::partial_sort`
//! when `k * 64 <= n`, otherwise `std::nth_element` at `k - 1` (followed, for `sorted=True`, by
//! `std::sort` of the first `k - 1` pairs). Which of several equal values wins a slot depends on
//! those exact algorithms, so this module reproduces libstdc++'s introselect, introsort, heap
//! select and heap sort step by step (GCC's `stl_algo.h` / `stl_heap.h`; the behaviour is pinned
//! by `tests/data/topk_cases.json`, generated from real libstdc++ by `tests/data/topk_gen.cpp`).
//!
//! The `libstdcxx_*` functions expose the individual routines on an `f32` row (pairs built as
//! torch does) and return the resulting order of original indices, so each step can be checked
//! against the C++ generator.

/// torch uses `partial_sort` when `k * PARTIAL_SORT_RATIO <= n`, else `nth_element`.
pub const PARTIAL_SORT_RATIO: usize = 64;
/// libstdc++ `_S_threshold`: introsort stops partitioning ranges of at most this many elements.
const SORT_THRESHOLD: usize = 16;
/// libstdc++ introselect switches to insertion sort at ranges of at most this many elements.
const SELECT_THRESHOLD: usize = 3;

/// One queue entry: the value and its original index.
type Pair = (f32, usize);

/// torch's top-k comparator: NaN precedes every non-NaN, otherwise the larger value precedes.
/// This is a strict weak order on all f32 (NaNs form the top class, -0 and +0 are equivalent).
fn precedes(a: Pair, b: Pair) -> bool {
    (a.0.is_nan() && !b.0.is_nan()) || a.0 > b.0
}

/// `std::__lg`: floor(log2 n) for n > 0 (0 for n == 0, which callers never pass).
fn floor_log2(n: usize) -> usize {
    n.checked_ilog2().unwrap_or(0) as usize
}

/// The queue torch builds: `(values[i], i)` in index order.
fn make_queue(values: &[f32]) -> Vec<Pair> {
    values.iter().copied().zip(0..).collect()
}

fn indices(q: &[Pair]) -> Vec<usize> {
    q.iter().map(|p| p.1).collect()
}

// ---------------------------------------------------------------------------------------------
// Heap routines (stl_heap.h). Indices are relative to the slice, signed as in the C++ code so
// the integer divisions round the same way.
// ---------------------------------------------------------------------------------------------

/// `std::__push_heap`: sift `value` up from `hole` towards `top`.
fn push_heap(q: &mut [Pair], mut hole: isize, top: isize, value: Pair) {
    let mut parent = (hole - 1) / 2;
    while hole > top && precedes(q[parent as usize], value) {
        q[hole as usize] = q[parent as usize];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    q[hole as usize] = value;
}

/// `std::__adjust_heap`: move the hole at `hole` down to a leaf along the preferred children,
/// then push `value` back up from there.
fn adjust_heap(q: &mut [Pair], mut hole: isize, len: isize, value: Pair) {
    let top = hole;
    let mut second_child = hole;
    while second_child < (len - 1) / 2 {
        second_child = 2 * (second_child + 1);
        if precedes(q[second_child as usize], q[(second_child - 1) as usize]) {
            second_child -= 1;
        }
        q[hole as usize] = q[second_child as usize];
        hole = second_child;
    }
    if len & 1 == 0 && second_child == (len - 2) / 2 {
        second_child = 2 * (second_child + 1);
        q[hole as usize] = q[(second_child - 1) as usize];
        hole = second_child - 1;
    }
    push_heap(q, hole, top, value);
}

/// `std::__make_heap` on the whole slice.
fn make_heap(q: &mut [Pair]) {
    let len = q.len() as isize;
    if len < 2 {
        return;
    }
    let mut parent = (len - 2) / 2;
    loop {
        let value = q[parent as usize];
        adjust_heap(q, parent, len, value);
        if parent == 0 {
            return;
        }
        parent -= 1;
    }
}

/// `std::__pop_heap(first, first + heap_len, first + result)`: the top goes to `result`, the
/// old `q[result]` is sifted into the heap `[0, heap_len)`.
fn pop_heap(q: &mut [Pair], heap_len: usize, result: usize) {
    let value = q[result];
    q[result] = q[0];
    adjust_heap(q, 0, heap_len as isize, value);
}

/// `std::__sort_heap` on the whole slice.
fn sort_heap(q: &mut [Pair]) {
    let mut last = q.len();
    while last > 1 {
        last -= 1;
        pop_heap(q, last, last);
    }
}

/// `std::__heap_select(first, first + middle, last)`: afterwards `[0, middle)` is a heap of the
/// `middle` first pairs in the comparator's order.
fn heap_select(q: &mut [Pair], middle: usize) {
    make_heap(&mut q[..middle]);
    for i in middle..q.len() {
        if precedes(q[i], q[0]) {
            pop_heap(q, middle, i);
        }
    }
}

/// `std::__partial_sort(first, first + middle, last)`.
fn partial_sort(q: &mut [Pair], middle: usize) {
    heap_select(q, middle);
    sort_heap(&mut q[..middle]);
}

// ---------------------------------------------------------------------------------------------
// Sorting and selection routines (stl_algo.h), on `q[first..last]` with absolute indices.
// ---------------------------------------------------------------------------------------------

/// `std::__unguarded_linear_insert`: shift `q[last]` left while it precedes its left neighbour.
/// The caller guarantees an element to its left that it does not precede; the `next > 0` guard
/// only keeps a broken invariant from underflowing and never changes the result.
fn unguarded_linear_insert(q: &mut [Pair], mut last: usize) {
    let value = q[last];
    let mut next = last - 1;
    while precedes(value, q[next]) {
        q[last] = q[next];
        last = next;
        if next == 0 {
            break;
        }
        next -= 1;
    }
    q[last] = value;
}

/// `std::__insertion_sort` of `q[first..last]`.
fn insertion_sort(q: &mut [Pair], first: usize, last: usize) {
    if first == last {
        return;
    }
    for i in first + 1..last {
        if precedes(q[i], q[first]) {
            let value = q[i];
            q.copy_within(first..i, first + 1);
            q[first] = value;
        } else {
            unguarded_linear_insert(q, i);
        }
    }
}

/// `std::__unguarded_insertion_sort` of `q[first..last]`.
fn unguarded_insertion_sort(q: &mut [Pair], first: usize, last: usize) {
    for i in first..last {
        unguarded_linear_insert(q, i);
    }
}

/// `std::__final_insertion_sort` of `q[first..last]`.
fn final_insertion_sort(q: &mut [Pair], first: usize, last: usize) {
    if last - first > SORT_THRESHOLD {
        insertion_sort(q, first, first + SORT_THRESHOLD);
        unguarded_insertion_sort(q, first + SORT_THRESHOLD, last);
    } else {
        insertion_sort(q, first, last);
    }
}

/// `std::__move_median_to_first(result, a, b, c)`.
fn move_median_to_first(q: &mut [Pair], result: usize, a: usize, b: usize, c: usize) {
    let pick = if precedes(q[a], q[b]) {
        if precedes(q[b], q[c]) {
            b
        } else if precedes(q[a], q[c]) {
            c
        } else {
            a
        }
    } else if precedes(q[a], q[c]) {
        a
    } else if precedes(q[b], q[c]) {
        c
    } else {
        b
    };
    q.swap(result, pick);
}

/// `std::__unguarded_partition(first, last, pivot)`. The pivot (a median of three inside the
/// range) stops both scans; the bounds guards never fire for a strict weak order.
fn unguarded_partition(q: &mut [Pair], mut first: usize, mut last: usize, pivot: usize) -> usize {
    let upper = last;
    loop {
        while first < upper && precedes(q[first], q[pivot]) {
            first += 1;
        }
        last -= 1;
        while last > pivot && precedes(q[pivot], q[last]) {
            last -= 1;
        }
        if first >= last {
            return first;
        }
        q.swap(first, last);
        first += 1;
    }
}

/// `std::__unguarded_partition_pivot(first, last)`; needs `last - first >= 4`.
fn unguarded_partition_pivot(q: &mut [Pair], first: usize, last: usize) -> usize {
    let mid = first + (last - first) / 2;
    move_median_to_first(q, first, first + 1, mid, last - 1);
    unguarded_partition(q, first + 1, last, first)
}

/// `std::__introselect(first, nth, last, depth_limit)` on the whole slice; `nth < q.len()`.
fn introselect(q: &mut [Pair], nth: usize, mut depth_limit: usize) {
    let mut first = 0;
    let mut last = q.len();
    while last - first > SELECT_THRESHOLD {
        if depth_limit == 0 {
            heap_select(&mut q[first..last], nth + 1 - first);
            q.swap(first, nth);
            return;
        }
        depth_limit -= 1;
        let cut = unguarded_partition_pivot(q, first, last);
        if cut <= nth {
            first = cut;
        } else {
            last = cut;
        }
    }
    insertion_sort(q, first, last);
}

/// `std::__introsort_loop(first, last, depth_limit)`.
fn introsort_loop(q: &mut [Pair], first: usize, mut last: usize, mut depth_limit: usize) {
    while last - first > SORT_THRESHOLD {
        if depth_limit == 0 {
            let len = last - first;
            partial_sort(&mut q[first..last], len);
            return;
        }
        depth_limit -= 1;
        let cut = unguarded_partition_pivot(q, first, last);
        introsort_loop(q, cut, last, depth_limit);
        last = cut;
    }
}

/// `std::__sort` with an explicit depth limit (`std::sort` passes `2 * floor(log2 n)`).
fn introsort(q: &mut [Pair], depth_limit: usize) {
    if q.is_empty() {
        return;
    }
    let n = q.len();
    introsort_loop(q, 0, n, depth_limit);
    final_insertion_sort(q, 0, n);
}

/// `std::nth_element(begin, begin + nth, end)`; a no-op when `nth >= q.len()`, as in C++.
fn nth_element(q: &mut [Pair], nth: usize) {
    if nth >= q.len() {
        return;
    }
    let depth_limit = 2 * floor_log2(q.len());
    introselect(q, nth, depth_limit);
}

/// The queue after torch's selection step for `topk(k)` (k already clamped to `1..=n`): the
/// first `k` pairs are the winners; with `sorted` they are also in torch's output order.
fn topk_queue(values: &[f32], k: usize, sorted: bool) -> Vec<Pair> {
    let mut q = make_queue(values);
    let n = q.len();
    if k * PARTIAL_SORT_RATIO <= n {
        partial_sort(&mut q, k);
    } else {
        nth_element(&mut q, k - 1);
        if sorted {
            introsort(&mut q[..k - 1], 2 * floor_log2(k - 1));
        }
    }
    q
}

/// Whether torch CPU's `topk(k)` on `n` values takes the `partial_sort` path (else
/// `nth_element`).
pub fn uses_partial_sort(n: usize, k: usize) -> bool {
    k > 0 && k.saturating_mul(PARTIAL_SORT_RATIO) <= n
}

/// The set of indices torch CPU's `topk(k)` returns for `values`, sorted ascending.
/// `k` is clamped to `values.len()`. Uses libstdc++ introselect (`nth_element`) when
/// `k*64 > n` and `partial_sort` (heap select) when `k*64 <= n`, exactly as torch does.
pub fn torch_cpu_topk_set(values: &[f32], k: usize) -> Vec<usize> {
    let k = k.min(values.len());
    if k == 0 {
        return Vec::new();
    }
    let q = topk_queue(values, k, false);
    let mut set = indices(&q[..k]);
    set.sort_unstable();
    set
}

/// The indices in the order torch CPU's `topk(k, sorted=True)` returns them (descending by value,
/// ties in the order torch leaves them): used for `moe_indices`.
///
/// `k` is clamped to `values.len()`; `k == 0` or an empty row gives an empty result.
pub fn torch_cpu_topk_order(values: &[f32], k: usize) -> Vec<usize> {
    let k = k.min(values.len());
    if k == 0 {
        return Vec::new();
    }
    let q = topk_queue(values, k, true);
    indices(&q[..k])
}

/// libstdc++ `std::nth_element(q, q + nth, q + n)` with torch's comparator on `(values[i], i)`:
/// the resulting order of original indices (identity when `nth >= n`).
pub fn libstdcxx_nth_element(values: &[f32], nth: usize) -> Vec<usize> {
    let mut q = make_queue(values);
    nth_element(&mut q, nth);
    indices(&q)
}

/// libstdc++ `std::__introselect` with an explicit `depth_limit`, so tests can drive the
/// heap-select fallback that real rows almost never reach (identity when `nth >= n`).
pub fn libstdcxx_introselect(values: &[f32], nth: usize, depth_limit: usize) -> Vec<usize> {
    let mut q = make_queue(values);
    if nth < q.len() {
        introselect(&mut q, nth, depth_limit);
    }
    indices(&q)
}

/// libstdc++ `std::partial_sort(q, q + middle, q + n)` with torch's comparator: the resulting
/// order of original indices (`middle` is clamped to `n`).
pub fn libstdcxx_partial_sort(values: &[f32], middle: usize) -> Vec<usize> {
    let mut q = make_queue(values);
    let middle = middle.min(q.len());
    partial_sort(&mut q, middle);
    indices(&q)
}

/// libstdc++ `std::sort` with torch's comparator: the resulting order of original indices.
pub fn libstdcxx_sort(values: &[f32]) -> Vec<usize> {
    libstdcxx_introsort(values, 2 * floor_log2(values.len()))
}

/// libstdc++ `std::sort`'s body (introsort loop, then final insertion sort) with an explicit
/// `depth_limit`, so tests can drive its heap-sort fallback.
pub fn libstdcxx_introsort(values: &[f32], depth_limit: usize) -> Vec<usize> {
    let mut q = make_queue(values);
    introsort(&mut q, depth_limit);
    indices(&q)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEG_INF: f32 = f32::NEG_INFINITY;

    #[test]
    fn spec_example_neg_inf_ties() {
        let row = [
            1.0, 1.0, NEG_INF, NEG_INF, NEG_INF, NEG_INF, NEG_INF, 1.0, NEG_INF, NEG_INF, NEG_INF,
            NEG_INF,
        ];
        assert_eq!(torch_cpu_topk_set(&row, 6), vec![0, 1, 7, 8, 9, 11]);
    }

    #[test]
    fn degenerate_inputs_do_not_panic() {
        assert!(torch_cpu_topk_set(&[], 3).is_empty());
        assert!(torch_cpu_topk_order(&[], 0).is_empty());
        assert!(torch_cpu_topk_set(&[1.0, 2.0], 0).is_empty());
        assert_eq!(torch_cpu_topk_set(&[1.0, 2.0], 5), vec![0, 1]);
        assert_eq!(torch_cpu_topk_order(&[1.0, 2.0, 0.5], 3), vec![1, 0, 2]);
        assert_eq!(
            torch_cpu_topk_order(&[f32::NAN, 2.0, f32::INFINITY], 2),
            vec![0, 2]
        );
        assert_eq!(libstdcxx_nth_element(&[3.0, 1.0], 7), vec![0, 1]);
        assert!(libstdcxx_sort(&[]).is_empty());
    }

    #[test]
    fn heap_routines_sort_descending() {
        let values: Vec<f32> = (0..50).map(|i| ((i * 37) % 50) as f32).collect();
        let order = libstdcxx_partial_sort(&values, values.len());
        let sorted: Vec<f32> = order.iter().map(|&i| values[i]).collect();
        assert!(sorted.windows(2).all(|w| w[0] >= w[1]));
        let order = libstdcxx_introsort(&values, 0);
        let sorted: Vec<f32> = order.iter().map(|&i| values[i]).collect();
        assert!(sorted.windows(2).all(|w| w[0] >= w[1]));
    }

    #[test]
    fn partial_sort_switch_at_64() {
        assert!(uses_partial_sort(128, 2));
        assert!(!uses_partial_sort(127, 2));
        assert!(!uses_partial_sort(10, 0));
    }
}
