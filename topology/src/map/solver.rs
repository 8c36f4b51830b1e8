//! The search: a backtracking over destination candidates with forward checking, and, when it
//! fails, the explanation of the failure it found; when it succeeds on a node with more GPUs
//! than the image, why it left each other GPU out.

use super::choice::{self, Fit, Preference, Unused, UnusedGpu};
use super::explain::{GpuRef, LocalHive, MapError, Reason, Rejection, Unplaced};
use super::mapping::{GpuMapping, Mapping};
use super::matching::max_matching;
use super::rules::{rejection, static_reasons, static_rejections};
use super::side::{link_fits, Gpu, Side};
use crate::options::{Check, CheckOptions};

#[derive(Clone, Debug)]
struct State {
    assign: Vec<Option<usize>>,
    used_by: Vec<Option<usize>>,
    cpu_map: Vec<Option<usize>>,
    cpu_rev: Vec<Option<usize>>,
}

struct Solver<'a> {
    src: &'a Side,
    dst: &'a Side,
    numa: bool,
    /// Static candidates per source GPU, in preference order.
    candidates: Vec<Vec<usize>>,
    /// The static part of each candidate's [`Fit`], by source and destination.
    fits: Vec<Vec<Fit>>,
    order: Vec<usize>,
    state: State,
    /// Deepest failure: (depth, source GPU, state then).
    deepest: Option<(usize, usize, State)>,
    /// Search nodes visited (placements tried), for the complexity bound.
    nodes: usize,
}

type Bindings = Vec<(usize, usize)>;

impl Solver<'_> {
    /// Why `d` cannot take `s` given the current state, or the CPU bindings it would add (one
    /// entry per way of matching the GPU's CPU links).
    fn dynamic(&self, s: usize, d: usize) -> Result<Vec<Bindings>, Reason> {
        if let Some(by) = self.state.used_by[d] {
            return Err(Reason::Taken {
                by: self.src.gpus[by].r.gpu_id,
            });
        }
        for (s2, d2) in self.state.assign.iter().enumerate() {
            let Some(d2) = *d2 else { continue };
            let pairs = [
                (self.src.xgmi[s][s2], self.dst.xgmi[d][d2]),
                (self.src.xgmi[s2][s], self.dst.xgmi[d2][d]),
            ];
            for (sl, dl) in pairs {
                if let Some(two_way) = sl {
                    if !dl.is_some_and(|dtw| dtw || !two_way) {
                        return Err(Reason::MissingXgmiLink {
                            source_peer: self.src.gpus[s2].r.gpu_id,
                            destination_peer: self.dst.gpus[d2].r.gpu_id,
                        });
                    }
                }
            }
        }
        if !self.numa {
            return Ok(vec![Vec::new()]);
        }
        let (sg, dg) = (&self.src.gpus[s], &self.dst.gpus[d]);
        let mut out = Vec::new();
        let mut used = vec![false; dg.cpu_links.len()];
        self.cpu_alternatives(sg, dg, 0, &mut used, &mut Vec::new(), &mut out);
        if out.is_empty() {
            let sl = sg
                .cpu_links
                .iter()
                .find(|sl| {
                    let mapped = self.state.cpu_map[sl.cpu];
                    !dg.cpu_links.iter().any(|dl| {
                        link_fits(sl, dl)
                            && mapped.map_or(self.state.cpu_rev[dl.cpu].is_none(), |m| m == dl.cpu)
                    })
                })
                .or(sg.cpu_links.first());
            let source_cpu = sl.map_or(0, |l| self.src.cpu_ids[l.cpu]);
            return Err(Reason::NumaConflict {
                source_cpu,
                mapped_to: sl
                    .and_then(|l| self.state.cpu_map[l.cpu])
                    .map(|c| self.dst.cpu_ids[c]),
                destination_cpus: dg
                    .cpu_links
                    .iter()
                    .map(|l| self.dst.cpu_ids[l.cpu])
                    .collect(),
            });
        }
        Ok(out)
    }

    fn cpu_alternatives(
        &self,
        s: &Gpu,
        d: &Gpu,
        i: usize,
        used: &mut [bool],
        binds: &mut Bindings,
        out: &mut Vec<Bindings>,
    ) {
        let Some(sl) = s.cpu_links.get(i) else {
            if !out.contains(binds) {
                out.push(binds.clone());
            }
            return;
        };
        for (j, dl) in d.cpu_links.iter().enumerate() {
            if used[j] || !link_fits(sl, dl) {
                continue;
            }
            let bound = self.state.cpu_map[sl.cpu].or_else(|| {
                binds
                    .iter()
                    .find(|(sc, _)| *sc == sl.cpu)
                    .map(|&(_, dc)| dc)
            });
            let new = match bound {
                Some(dc) if dc == dl.cpu => false,
                Some(_) => continue,
                None => {
                    if self.state.cpu_rev[dl.cpu].is_some()
                        || binds.iter().any(|&(_, dc)| dc == dl.cpu)
                    {
                        continue;
                    }
                    true
                }
            };
            used[j] = true;
            if new {
                binds.push((sl.cpu, dl.cpu));
            }
            self.cpu_alternatives(s, d, i + 1, used, binds, out);
            if new {
                binds.pop();
            }
            used[j] = false;
        }
    }

    fn apply(&mut self, s: usize, d: usize, binds: &Bindings) {
        self.state.assign[s] = Some(d);
        self.state.used_by[d] = Some(s);
        for &(sc, dc) in binds {
            self.state.cpu_map[sc] = Some(dc);
            self.state.cpu_rev[dc] = Some(sc);
        }
    }

    fn undo(&mut self, s: usize, d: usize, binds: &Bindings) {
        self.state.assign[s] = None;
        self.state.used_by[d] = None;
        for &(sc, dc) in binds {
            self.state.cpu_map[sc] = None;
            self.state.cpu_rev[dc] = None;
        }
    }

    /// Forward check: every unplaced source GPU keeps a candidate, and all of them can still be
    /// placed at once. On failure, the source GPU left without a candidate, if one is.
    fn feasible(&self) -> Result<(), Option<usize>> {
        let unplaced: Vec<usize> = self
            .order
            .iter()
            .copied()
            .filter(|&s| self.state.assign[s].is_none())
            .collect();
        let mut domains = Vec::with_capacity(unplaced.len());
        for &s in &unplaced {
            let dom: Vec<usize> = self.candidates[s]
                .iter()
                .copied()
                .filter(|&d| self.dynamic(s, d).is_ok())
                .collect();
            if dom.is_empty() {
                return Err(Some(s));
            }
            domains.push(dom);
        }
        let (left, _) = max_matching(&domains, self.dst.gpus.len());
        if left.iter().all(Option::is_some) {
            Ok(())
        } else {
            Err(None)
        }
    }

    /// How well `d` fits `s` with the GPUs placed so far.
    fn fit(&self, s: usize, d: usize) -> Fit {
        if self.numa {
            // A rule then, not a preference: what breaks it is not a candidate.
            return self.fits[s][d];
        }
        Fit {
            numa_breaks: choice::numa_breaks(self.src, self.dst, &self.state.assign, s, d),
            ..self.fits[s][d]
        }
    }

    /// `s`'s candidates in preference order with the GPUs placed so far. With the NUMA check on
    /// the rule keeps the placement and the static order is the order.
    fn ordered_candidates(&self, s: usize) -> Vec<usize> {
        let mut c = self.candidates[s].clone();
        if !self.numa {
            c.sort_by_key(|&d| (self.fit(s, d), d));
        }
        c
    }

    fn search(&mut self, depth: usize) -> bool {
        let Some(&s) = self.order.get(depth) else {
            return true;
        };
        for d in self.ordered_candidates(s) {
            let Ok(alternatives) = self.dynamic(s, d) else {
                continue;
            };
            for binds in alternatives {
                self.nodes += 1;
                self.apply(s, d, &binds);
                if self.feasible().is_ok() && self.search(depth + 1) {
                    return true;
                }
                self.undo(s, d, &binds);
            }
        }
        if self.deepest.as_ref().is_none_or(|(k, _, _)| depth > *k) {
            self.deepest = Some((depth, s, self.state.clone()));
        }
        false
    }

    /// Why each destination the found mapping does not use is left out (see `choice`).
    fn explain_unused(&mut self, options: &CheckOptions) -> Vec<UnusedGpu> {
        let n = self.src.gpus.len();
        let mut out = Vec::new();
        if n == 0 {
            return out; // nothing was placed, so nothing was preferred
        }
        for d in 0..self.dst.gpus.len() {
            if self.state.used_by[d].is_some() {
                continue;
            }
            let dg = &self.dst.gpus[d];
            let why = match (0..n).find(|&s| self.candidates[s].contains(&d)) {
                None => self.unfit(d, options),
                Some(s) => self.not_chosen(s, d),
            };
            out.push(UnusedGpu {
                gpu: dg.r,
                render_minor: dg.render_minor,
                why,
            });
        }
        out
    }

    /// `d` fits no source GPU (there is at least one): why not, for the one it comes closest
    /// to (the fewest reasons; the first among equals).
    fn unfit(&self, d: usize, options: &CheckOptions) -> Unused {
        let dg = &self.dst.gpus[d];
        let closest = self
            .src
            .gpus
            .iter()
            .min_by_key(|sg| static_reasons(sg, dg, options).len());
        let (image_gpu, r) = closest
            .map(|sg| (sg.r.gpu_id, rejection(sg, dg, options)))
            .unwrap_or_default();
        let (reason, lifted_by) = r
            .map_or((Reason::Starves { source_gpu: None }, Vec::new()), |r| {
                (r.reason, r.lifted_by)
            });
        Unused::Unfit {
            image_gpu,
            reason,
            lifted_by,
        }
    }

    /// `d` could take source GPU `s`, which went elsewhere: the first preference that put it
    /// there, judged with every other GPU where the mapping put it.
    fn not_chosen(&mut self, s: usize, d: usize) -> Unused {
        let Some(c) = self.state.assign[s] else {
            return Unused::NotChosen {
                image_gpu: self.src.gpus[s].r.gpu_id,
                chosen: self.dst.gpus[d].r,
                because: Preference::OthersNeedIt,
            };
        };
        let kept = self.state.clone();
        self.unplace(s);
        let (chosen, this) = (self.fit(s, c), self.fit(s, d));
        let (sg, cg, dg) = (&self.src.gpus[s], &self.dst.gpus[c], &self.dst.gpus[d]);
        // The first field of the fit (in the order of preference) where the two differ.
        let fields = |f: Fit| {
            [
                usize::from(f.other_id),
                f.hive_gap,
                f.numa_breaks,
                f.differing,
            ]
        };
        let (fc, fd) = (fields(chosen), fields(this));
        let first = (0..fc.len()).find(|&i| fc[i] != fd[i]);
        let because = match first {
            Some(i) if fc[i] < fd[i] => match i {
                0 => Preference::SameGpuId,
                1 => Preference::HiveSize {
                    image: sg.hive_size,
                    chosen: cg.hive_size,
                    this: dg.hive_size,
                },
                2 => Preference::NumaPlacement,
                _ => Preference::Properties {
                    differing: choice::differing(sg, dg),
                },
            },
            // Equal or better by preference: the rules or the other GPUs kept it out.
            _ => match self.dynamic(s, d) {
                Err(reason) => Preference::Placement { reason },
                Ok(_) if first.is_none() && c < d => Preference::NodeOrder,
                Ok(_) => Preference::OthersNeedIt,
            },
        };
        self.state = kept;
        Unused::NotChosen {
            image_gpu: sg.r.gpu_id,
            chosen: cg.r,
            because,
        }
    }

    /// Takes source GPU `s` out of the current state, with the CPU bindings only it held.
    fn unplace(&mut self, s: usize) {
        let Some(d) = self.state.assign[s].take() else {
            return;
        };
        self.state.used_by[d] = None;
        for l in &self.src.gpus[s].cpu_links {
            let still_used = self.state.assign.iter().enumerate().any(|(s2, a)| {
                a.is_some() && self.src.gpus[s2].cpu_links.iter().any(|l2| l2.cpu == l.cpu)
            });
            if !still_used {
                if let Some(dc) = self.state.cpu_map[l.cpu].take() {
                    self.state.cpu_rev[dc] = None;
                }
            }
        }
    }

    /// For the stuck source GPU `s` at the recorded state: each destination's first reason.
    fn explain_stuck(&mut self, s: usize, options: &CheckOptions) -> Vec<Rejection> {
        let mut out = Vec::new();
        for d in 0..self.dst.gpus.len() {
            let destination = self.dst.gpus[d].r;
            let statics = static_reasons(&self.src.gpus[s], &self.dst.gpus[d], options);
            let reason = match statics.into_iter().next() {
                Some(r) => r,
                None => match self.dynamic(s, d) {
                    Err(r) => r,
                    Ok(alternatives) => {
                        // It fits by itself, so taking it must starve another GPU.
                        let mut starved = None;
                        for binds in alternatives {
                            self.apply(s, d, &binds);
                            let f = self.feasible();
                            self.undo(s, d, &binds);
                            if let Err(Some(other)) = f {
                                starved = Some(other);
                                break;
                            }
                        }
                        Reason::Starves {
                            source_gpu: starved.map(|o| self.src.gpus[o].r.gpu_id),
                        }
                    }
                },
            };
            let lifted_by = reason.check().into_iter().collect();
            out.push(Rejection {
                destination,
                reason,
                lifted_by,
            });
        }
        out
    }
}

/// What the search did, for the complexity bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Stats {
    /// Placements tried.
    pub(super) nodes: usize,
}

pub(super) fn solve(src: &Side, dst: &Side, options: &CheckOptions) -> Result<Mapping, MapError> {
    solve_counting(src, dst, options).0
}

pub(super) fn solve_counting(
    src: &Side,
    dst: &Side,
    options: &CheckOptions,
) -> (Result<Mapping, MapError>, Stats) {
    let mut stats = Stats::default();
    let result = solve_inner(src, dst, options, &mut stats);
    (result, stats)
}

fn solve_inner(
    src: &Side,
    dst: &Side,
    options: &CheckOptions,
    stats: &mut Stats,
) -> Result<Mapping, MapError> {
    let n = src.gpus.len();
    let m = dst.gpus.len();
    if n > m {
        return Err(MapError::GpuCount {
            image_gpus: n,
            local_gpus: m,
        });
    }

    // Static candidates in preference order (see `choice`), the lowest node first among equals.
    let fits: Vec<Vec<Fit>> = src
        .gpus
        .iter()
        .map(|sg| {
            dst.gpus
                .iter()
                .map(|dg| choice::static_fit(sg, dg))
                .collect()
        })
        .collect();
    let candidates: Vec<Vec<usize>> = (0..n)
        .map(|s| {
            let mut c: Vec<usize> = (0..m)
                .filter(|&d| static_reasons(&src.gpus[s], &dst.gpus[d], options).is_empty())
                .collect();
            c.sort_by_key(|&d| (fits[s][d], d));
            c
        })
        .collect();

    let unplaced: Vec<Unplaced> = (0..n)
        .filter(|&s| candidates[s].is_empty())
        .map(|s| Unplaced {
            gpu: src.gpus[s].r,
            rejections: static_rejections(src, dst, s, options),
        })
        .collect();
    if !unplaced.is_empty() {
        return Err(MapError::NoCandidate { unplaced });
    }

    let (left, right) = max_matching(&candidates, m);
    if let Some(u) = left.iter().position(Option::is_none) {
        return Err(contention(src, dst, options, &candidates, &right, u));
    }
    if let Some(e) = hive_shortage(src, dst, options, &candidates) {
        return Err(e);
    }

    // Place hive GPUs first (largest hives, members together), then the most constrained.
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&s| {
        let g = &src.gpus[s];
        (
            std::cmp::Reverse(g.hive_size),
            first_hive_member(src, s),
            candidates[s].len(),
            s,
        )
    });

    let mut solver = Solver {
        src,
        dst,
        numa: options.numa,
        candidates,
        fits,
        order,
        state: State {
            assign: vec![None; n],
            used_by: vec![None; m],
            cpu_map: vec![None; src.cpu_ids.len()],
            cpu_rev: vec![None; dst.cpu_ids.len()],
        },
        deepest: None,
        nodes: 0,
    };
    let found = solver.feasible().is_ok() && solver.search(0);
    stats.nodes += solver.nodes;
    if found {
        let unused = solver.explain_unused(options);
        return Ok(solution(src, dst, &solver.state, options.numa, unused));
    }

    if options.numa && solve_inner(src, dst, &options.with(Check::Numa, false), stats).is_ok() {
        return Err(MapError::NumaPlacement {
            image: src.numa_groups(),
            local: dst.numa_groups(),
        });
    }

    let (s, state) = match solver.deepest.take() {
        Some((_, s, state)) => (s, state),
        None => (solver.order[0], solver.state.clone()),
    };
    solver.state = state;
    let partial = solver
        .order
        .iter()
        .filter_map(|&s2| {
            solver.state.assign[s2].map(|d| (src.gpus[s2].r.gpu_id, dst.gpus[d].r.gpu_id))
        })
        .collect();
    let rejections = solver.explain_stuck(s, options);
    Err(MapError::NoConsistentMapping {
        partial,
        stuck: Unplaced {
            gpu: src.gpus[s].r,
            rejections,
        },
    })
}

/// The smallest index of a GPU connected to `s` by xGMI (itself when in no hive): keeps hive
/// members together in the placement order.
fn first_hive_member(side: &Side, s: usize) -> usize {
    let mut seen = vec![false; side.gpus.len()];
    let mut stack = vec![s];
    seen[s] = true;
    let mut min = s;
    while let Some(a) = stack.pop() {
        min = min.min(a);
        for (b, link) in side.xgmi[a].iter().enumerate() {
            if !seen[b] && *link == Some(true) {
                seen[b] = true;
                stack.push(b);
            }
        }
    }
    min
}

/// Groups of GPUs joined by xGMI links (either direction), as sorted GPU indices, in order of
/// their first GPU; GPUs without xGMI are groups of one.
fn xgmi_groups(side: &Side) -> Vec<Vec<usize>> {
    let n = side.gpus.len();
    let mut group: Vec<Option<usize>> = vec![None; n];
    let mut out: Vec<Vec<usize>> = Vec::new();
    for start in 0..n {
        if group[start].is_some() {
            continue;
        }
        let g = out.len();
        let mut members = vec![start];
        group[start] = Some(g);
        let mut i = 0;
        while let Some(&a) = members.get(i) {
            i += 1;
            for (b, gb) in group.iter_mut().enumerate() {
                if gb.is_none() && (side.xgmi[a][b].is_some() || side.xgmi[b][a].is_some()) {
                    *gb = Some(g);
                    members.push(b);
                }
            }
        }
        members.sort_unstable();
        out.push(members);
    }
    out
}

/// A source hive needs a destination group of xGMI-joined GPUs with as many GPUs that can take
/// one of its members (every source xGMI link must exist between the mapped GPUs). When no
/// group has that many, the hive cannot be placed: the error names the GPUs each group lacks.
fn hive_shortage(
    src: &Side,
    dst: &Side,
    options: &CheckOptions,
    candidates: &[Vec<usize>],
) -> Option<MapError> {
    let local = xgmi_groups(dst);
    for hive in xgmi_groups(src).into_iter().filter(|h| h.len() > 1) {
        let fits = |d: usize| hive.iter().any(|&s| candidates[s].contains(&d));
        if local
            .iter()
            .any(|g| g.iter().filter(|&&d| fits(d)).count() >= hive.len())
        {
            continue;
        }
        let first = &src.gpus[hive[0]];
        let local_hives = local
            .iter()
            .filter(|g| g.len() > 1)
            .map(|g| LocalHive {
                gpus: g.iter().map(|&d| dst.gpus[d].r).collect(),
                fitting: g.iter().filter(|&&d| fits(d)).count(),
                rejected: g
                    .iter()
                    .filter(|&&d| !fits(d))
                    .filter_map(|&d| rejection(first, &dst.gpus[d], options))
                    .collect(),
            })
            .collect();
        return Some(MapError::NoHiveFits {
            image_hive: hive.iter().map(|&s| src.gpus[s].r).collect::<Vec<GpuRef>>(),
            local_hives,
        });
    }
    None
}

/// A Hall violator after a maximum matching that leaves `u` unmatched: the source GPUs
/// reachable from `u` by alternating paths compete for fewer destinations.
fn contention(
    src: &Side,
    dst: &Side,
    options: &CheckOptions,
    candidates: &[Vec<usize>],
    right: &[Option<usize>],
    u: usize,
) -> MapError {
    let mut sources = vec![u];
    let mut dests: Vec<usize> = Vec::new();
    let mut i = 0;
    while let Some(&s) = sources.get(i) {
        i += 1;
        for &d in &candidates[s] {
            if !dests.contains(&d) {
                dests.push(d);
                if let Some(s2) = right[d] {
                    if !sources.contains(&s2) {
                        sources.push(s2);
                    }
                }
            }
        }
    }
    sources.sort_unstable();
    dests.sort_unstable();
    MapError::Contention {
        sources: sources.iter().map(|&s| src.gpus[s].r.gpu_id).collect(),
        destinations: dests.iter().map(|&d| dst.gpus[d].r.gpu_id).collect(),
        unplaced: sources
            .iter()
            .map(|&s| Unplaced {
                gpu: src.gpus[s].r,
                rejections: static_rejections(src, dst, s, options),
            })
            .collect(),
    }
}

fn solution(src: &Side, dst: &Side, state: &State, numa: bool, unused: Vec<UnusedGpu>) -> Mapping {
    let gpus = src
        .gpus
        .iter()
        .zip(&state.assign)
        .filter_map(|(sg, d)| {
            let dg = &dst.gpus[(*d)?];
            Some(GpuMapping {
                source_gpu_id: sg.r.gpu_id,
                destination_gpu_id: dg.r.gpu_id,
                source_node_id: sg.r.node_id,
                destination_node_id: dg.r.node_id,
                source_render_minor: sg.render_minor,
                destination_render_minor: dg.render_minor,
            })
        })
        .collect();
    let mut cpu_map: Vec<Option<usize>> = if numa {
        state.cpu_map.clone()
    } else {
        vec![None; src.cpu_ids.len()]
    };
    if !numa {
        for (sg, d) in src.gpus.iter().zip(&state.assign) {
            let Some(d) = *d else { continue };
            for sl in &sg.cpu_links {
                if cpu_map[sl.cpu].is_none() {
                    cpu_map[sl.cpu] = dst.gpus[d]
                        .cpu_links
                        .iter()
                        .find(|dl| link_fits(sl, dl))
                        .map(|dl| dl.cpu);
                }
            }
        }
    }
    let cpus = cpu_map
        .iter()
        .enumerate()
        .filter_map(|(sc, dc)| Some((src.cpu_ids[sc], dst.cpu_ids[(*dc)?])))
        .collect();
    Mapping { gpus, cpus, unused }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::{GpuSpec, TopologyBuilder};
    use crate::model::{keys, Topology};

    /// GCDs two per CPU node, in hives of `hive`.
    fn gcds(n: usize, hive: usize) -> Topology {
        let mut b = TopologyBuilder::new().cpus(n / 2);
        for i in 0..n {
            b = b.gpu(GpuSpec::mi250x_gcd().numa(i / 2).caches(0));
        }
        for h in 0..n / hive {
            b = b.hive(h * hive..(h + 1) * hive);
        }
        b.build()
    }

    fn other_ids(mut t: Topology) -> Topology {
        for (i, g) in t.nodes.iter_mut().filter(|n| n.is_gpu()).enumerate() {
            g.gpu_id = 0xc000 + u32::try_from(i).unwrap();
        }
        t
    }

    fn nodes(src: &Topology, dst: &Topology) -> (bool, usize) {
        let (result, stats) =
            solve_counting(&Side::new(src), &Side::new(dst), &CheckOptions::default());
        (result.is_ok(), stats.nodes)
    }

    /// The search does not wander on a larger node: 8 GCDs in a hive onto two hives of 8 place
    /// one GPU per step, without backtracking; a subset of 2 likewise.
    #[test]
    fn a_subset_is_found_without_backtracking() {
        assert_eq!(nodes(&gcds(8, 8), &other_ids(gcds(16, 8))), (true, 8));
        assert_eq!(nodes(&gcds(2, 2), &other_ids(gcds(16, 8))), (true, 2));
        assert_eq!(nodes(&gcds(8, 4), &other_ids(gcds(16, 8))), (true, 8));
    }

    /// A hive that fits no destination hive is refused before the search starts.
    #[test]
    fn a_hive_short_of_fitting_gpus_is_refused_without_a_search() {
        let mut dst = other_ids(gcds(16, 8));
        for id in [0xc003, 0xc00c] {
            dst.gpu_mut(id).unwrap().properties.set(keys::FW_VERSION, 1);
        }
        assert_eq!(nodes(&gcds(8, 8), &dst), (false, 0));
    }
}
