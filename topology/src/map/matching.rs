//! Maximum bipartite matching, used for the links of one GPU pair and for the forward check of
//! the search.

/// Kuhn's augmenting paths. Returns, per left vertex, its right vertex (if matched) and per
/// right vertex its left vertex.
pub(super) fn max_matching(
    adj: &[Vec<usize>],
    n_right: usize,
) -> (Vec<Option<usize>>, Vec<Option<usize>>) {
    fn augment(
        u: usize,
        adj: &[Vec<usize>],
        seen: &mut [bool],
        right: &mut [Option<usize>],
    ) -> bool {
        for &v in &adj[u] {
            if seen[v] {
                continue;
            }
            seen[v] = true;
            if right[v].is_none_or(|w| augment(w, adj, seen, right)) {
                right[v] = Some(u);
                return true;
            }
        }
        false
    }
    let mut right = vec![None; n_right];
    for u in 0..adj.len() {
        let mut seen = vec![false; n_right];
        augment(u, adj, &mut seen, &mut right);
    }
    let mut left = vec![None; adj.len()];
    for (v, u) in right.iter().enumerate() {
        if let Some(u) = u {
            left[*u] = Some(v);
        }
    }
    (left, right)
}
