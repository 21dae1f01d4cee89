//! The distance kernels: dot products of `f32` vectors, what every search and every insert of
//! a graph computes most. A portable version whose sixteen running sums compilers vectorise,
//! and on x86-64 CPUs with AVX2 and FMA (checked at run time) intrinsics that keep four
//! 256-bit sums in registers; [`dot4`] reads the query once for four vectors. Kept apart from
//! the graph (`hnsw`) so that either can change without the other.

/// The dot product of two vectors of one length.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU was just seen to have the features the function is compiled for.
            return unsafe { dot_avx2_fma(a, b) };
        }
    }
    dot_portable(a, b)
}

/// Sixteen running sums, which compilers turn into vector instructions of any width.
fn dot_portable(a: &[f32], b: &[f32]) -> f32 {
    let mut sums = [0.0f32; 16];
    let (a_chunks, b_chunks) = (a.chunks_exact(16), b.chunks_exact(16));
    let tail: f32 = a_chunks
        .remainder()
        .iter()
        .zip(b_chunks.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        let (x, y): (&[f32; 16], &[f32; 16]) = (
            x.try_into().expect("chunks of 16"),
            y.try_into().expect("chunks of 16"),
        );
        for i in 0..16 {
            sums[i] += x[i] * y[i];
        }
    }
    let mut four = [0.0f32; 4];
    for i in 0..4 {
        four[i] = (sums[i] + sums[i + 4]) + (sums[i + 8] + sums[i + 12]);
    }
    (four[0] + four[2]) + (four[1] + four[3]) + tail
}

/// [`dot_portable`] with fused multiply-adds on four 256-bit registers (32 products a step),
/// summed as a tree at the end. Written with intrinsics: the compiler's own vectorisation of
/// the same loop kept its sums in memory and ran at a third of this speed.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn dot_avx2_fma(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let whole = n / 32 * 32;
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut sums = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i < whole {
        for (k, sum) in sums.iter_mut().enumerate() {
            // SAFETY: i + 8k + 8 <= whole <= the length of both slices.
            let (x, y) = unsafe {
                (
                    _mm256_loadu_ps(pa.add(i + 8 * k)),
                    _mm256_loadu_ps(pb.add(i + 8 * k)),
                )
            };
            *sum = _mm256_fmadd_ps(x, y, *sum);
        }
        i += 32;
    }
    let s = _mm256_add_ps(
        _mm256_add_ps(sums[0], sums[1]),
        _mm256_add_ps(sums[2], sums[3]),
    );
    let h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
    let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    let h = _mm_add_ss(h, _mm_shuffle_ps::<1>(h, h));
    _mm_cvtss_f32(h) + dot_portable(&a[whole..n], &b[whole..n])
}

/// The dot products of `query` with four vectors of its length.
pub fn dot4(query: &[f32], vectors: [&[f32]; 4]) -> [f32; 4] {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU was just seen to have the features the function is compiled for.
            return unsafe { dot4_avx2_fma(query, vectors) };
        }
    }
    vectors.map(|v| dot_portable(query, v))
}

/// [`dot4`] on 256-bit registers: each load of the query feeds four fused multiply-adds, two
/// running sums per vector.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn dot4_avx2_fma(query: &[f32], vectors: [&[f32]; 4]) -> [f32; 4] {
    use std::arch::x86_64::*;
    let n = vectors.iter().fold(query.len(), |n, v| n.min(v.len()));
    let whole = n / 16 * 16;
    let q = query.as_ptr();
    let p = vectors.map(<[f32]>::as_ptr);
    let mut sums = [[_mm256_setzero_ps(); 2]; 4];
    let mut i = 0;
    while i < whole {
        for half in 0..2 {
            let at = i + 8 * half;
            // SAFETY: at + 8 <= whole <= the length of the query and of every vector.
            let x = unsafe { _mm256_loadu_ps(q.add(at)) };
            for (sum, v) in sums.iter_mut().zip(p) {
                // SAFETY: as above.
                let y = unsafe { _mm256_loadu_ps(v.add(at)) };
                sum[half] = _mm256_fmadd_ps(x, y, sum[half]);
            }
        }
        i += 16;
    }
    let mut out = [0.0f32; 4];
    for ((o, sum), v) in out.iter_mut().zip(sums).zip(vectors) {
        let s = _mm256_add_ps(sum[0], sum[1]);
        let h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
        let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        let h = _mm_add_ss(h, _mm_shuffle_ps::<1>(h, h));
        *o = _mm_cvtss_f32(h) + dot_portable(&query[whole..n], &v[whole..n]);
    }
    out
}

/// Asks the CPU to start loading the first cache lines of `data`: a hint, with no effect on
/// results.
#[inline]
pub(crate) fn prefetch(data: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    for line in data.chunks(16).take(4) {
        // SAFETY: a prefetch is a hint that never faults, and the address is a live slice's.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                line.as_ptr().cast::<i8>(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = data;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` vectors of `d` values from a fixed sequence (no generator needed for sums).
    fn vectors(n: usize, d: usize) -> Vec<Vec<f32>> {
        (0..n)
            .map(|i| {
                (0..d)
                    .map(|j| ((i * 31 + j * 17) % 23) as f32 / 23.0 - 0.5)
                    .collect()
            })
            .collect()
    }

    #[test]
    fn dot_products_agree_across_implementations() {
        for d in [1, 7, 16, 31, 32, 33, 384, 385] {
            let v = vectors(5, d);
            let plain = |a: &[f32], b: &[f32]| -> f32 { a.iter().zip(b).map(|(x, y)| x * y).sum() };
            let expected = plain(&v[0], &v[1]);
            assert!((dot(&v[0], &v[1]) - expected).abs() < 1e-4, "{d}");
            assert!((dot_portable(&v[0], &v[1]) - expected).abs() < 1e-4, "{d}");
            let four = dot4(&v[0], [&v[1], &v[2], &v[3], &v[4]]);
            for (k, got) in four.iter().enumerate() {
                assert!((got - plain(&v[0], &v[k + 1])).abs() < 1e-4, "{d} {k}");
            }
        }
    }
}
