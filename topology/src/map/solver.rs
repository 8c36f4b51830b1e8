//! The search: a backtracking over destination candidates with forward checking, and, when it
//! fails, the explanation of the failure it found.

use super::explain::{MapError, Reason, Rejection, Unplaced};
use super::mapping::{GpuMapping, Mapping};
use super::matching::max_matching;
use super::rules::{static_reasons, static_rejections};
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
    order: Vec<usize>,
    state: State,
    /// Deepest failure: (depth, source GPU, state then).
    deepest: Option<(usize, usize, State)>,
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

    fn search(&mut self, depth: usize) -> bool {
        let Some(&s) = self.order.get(depth) else {
            return true;
        };
        for d in self.candidates[s].clone() {
            let Ok(alternatives) = self.dynamic(s, d) else {
                continue;
            };
            for binds in alternatives {
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

pub(super) fn solve(src: &Side, dst: &Side, options: &CheckOptions) -> Result<Mapping, MapError> {
    let n = src.gpus.len();
    if n != dst.gpus.len() {
        return Err(MapError::GpuCount {
            image_gpus: n,
            local_gpus: dst.gpus.len(),
        });
    }

    // Static candidates, same gpu_id first, then the same position, then the rest.
    let candidates: Vec<Vec<usize>> = (0..n)
        .map(|s| {
            let mut c: Vec<usize> = (0..n)
                .filter(|&d| static_reasons(&src.gpus[s], &dst.gpus[d], options).is_empty())
                .collect();
            c.sort_by_key(|&d| (dst.gpus[d].r.gpu_id != src.gpus[s].r.gpu_id, d != s, d));
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

    let (left, right) = max_matching(&candidates, n);
    if let Some(u) = left.iter().position(Option::is_none) {
        return Err(contention(src, dst, options, &candidates, &right, u));
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
        order,
        state: State {
            assign: vec![None; n],
            used_by: vec![None; n],
            cpu_map: vec![None; src.cpu_ids.len()],
            cpu_rev: vec![None; dst.cpu_ids.len()],
        },
        deepest: None,
    };
    if solver.feasible().is_ok() && solver.search(0) {
        return Ok(solution(src, dst, &solver.state, options.numa));
    }

    if options.numa && solve(src, dst, &options.with(Check::Numa, false)).is_ok() {
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

fn solution(src: &Side, dst: &Side, state: &State, numa: bool) -> Mapping {
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
    Mapping { gpus, cpus }
}
