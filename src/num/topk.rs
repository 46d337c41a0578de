//! torch CPU `topk(largest=True)` emulation (spec §12.6, §19.3).
//! SIGNATURES FIXED; bodies to be implemented.

/// The set of indices torch CPU's `topk(k)` returns for `values`, sorted ascending.
/// `k` is clamped to `values.len()`. Uses libstdc++ introselect (`nth_element`) when
/// `k*64 > n` and `partial_sort` (heap select) when `k*64 <= n`, exactly as torch does.
pub fn torch_cpu_topk_set(values: &[f32], k: usize) -> Vec<usize> { todo!() }
/// The indices in the order torch CPU's `topk(k, sorted=True)` returns them (descending by value,
/// ties in the order torch leaves them): used for `moe_indices`.
pub fn torch_cpu_topk_order(values: &[f32], k: usize) -> Vec<usize> { todo!() }
