//! Buffers shared between the files of a dump.
//!
//! A buffer can be in several files: a dma-buf of it imported into another process's
//! render node (amdgpu gives the same object back for its own device's dma-buf), a KFD BO
//! exported and imported into a render node, a dma-buf fd held by a process. Upstream's image
//! format names a shared buffer by one number, the GEM handle: the file that creates it at
//! restore (`is_import` 0, or the KFD BO whose `kfd_bo_entry.handle` is that number) and every
//! file that imports it (`is_import` 1, same handle), and `criu_dmabuf_node.gem_handle` of a
//! dma-buf fd. The [`Ledger`] finds which entries are one object by their dma-buf's inode (one
//! per object, on hardware and in the simulator) and writes the numbers so that upstream's
//! restore and ours rebuild the same sharing; an object the format cannot name (its handles
//! differ between processes, or its number is another shared buffer's) fails the dump with
//! the reason. Upstream's own dump guesses `is_import` from the handle number alone; its images
//! are restored as it restores them.
//!

use std::collections::{BTreeSet, HashMap};

use crate::gem::{GemError, ObjectId};

/// A change the [`Ledger`] asks of an image written earlier in the same dump (or of one not
/// written yet: a dma-buf's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Patch {
    /// Render image `id`'s entry `index` imports its buffer (a KFD BO turned out to create it).
    RenderImport {
        /// The render image.
        id: u32,
        /// The entry.
        index: usize,
    },
    /// KFD image `id`'s BO `index` is shared under `key`.
    KfdHandle {
        /// The KFD image.
        id: u32,
        /// The BO.
        index: usize,
        /// The key.
        key: u32,
    },
    /// Dma-buf image `id` names the buffer shared under `key`.
    Dmabuf {
        /// The dma-buf image.
        id: u32,
        /// The key.
        key: u32,
    },
}

/// What the dump knows of one buffer object.
#[derive(Debug, Default)]
struct Object {
    /// The KFD BO it is (image, index).
    kfd: Option<(u32, usize)>,
    /// Its render-node entries (image, index, handle), in the order seen.
    renders: Vec<(u32, usize, u32)>,
    /// The number it is shared under.
    key: Option<u32>,
    /// Whether anything imports it or holds it as a dma-buf fd.
    shared: bool,
}

/// The buffer objects a dump has seen, across the processes of the tree (criu dumps them all
/// from its own process): which entries are one object, and the numbers that name it.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    objects: HashMap<ObjectId, Object>,
    /// The objects each number names as a creator.
    creators: HashMap<u32, BTreeSet<ObjectId>>,
    /// Dma-buf images waiting for their object to be seen: (image id, object).
    pending: Vec<(u32, ObjectId)>,
    /// Keys given to shared KFD BOs that no render node holds.
    next_key: u32,
}

/// Keys for shared KFD BOs that no render node names: far above any GEM handle.
const FIRST_KFD_KEY: u32 = 0x4000_0000;

impl Ledger {
    /// Refuses a key that names a shared object and another creator.
    fn check(&self, key: u32) -> Result<(), GemError> {
        let creators = self.creators.get(&key).map_or(0, BTreeSet::len);
        let shared = self
            .creators
            .get(&key)
            .into_iter()
            .flatten()
            .any(|o| self.objects.get(o).is_some_and(|x| x.shared));
        if creators > 1 && shared {
            return Err(GemError::Unshareable(format!(
                "GEM handle {key} names a buffer shared between processes and another buffer \
                 that a process created: the image format (upstream's) names shared buffers by \
                 their handle number, so it cannot tell them apart"
            )));
        }
        Ok(())
    }

    /// The dma-buf images waiting for `object`, resolved to `key`.
    fn resolve_pending(&mut self, object: ObjectId, key: u32, patches: &mut Vec<Patch>) {
        let mut rest = Vec::new();
        for (id, o) in std::mem::take(&mut self.pending) {
            if o == object {
                patches.push(Patch::Dmabuf { id, key });
            } else {
                rest.push((id, o));
            }
        }
        self.pending = rest;
    }

    fn fresh_key(&mut self) -> u32 {
        let used: BTreeSet<u32> = self.creators.keys().copied().collect();
        let mut k = self.next_key.max(FIRST_KFD_KEY);
        while used.contains(&k) {
            k += 1;
        }
        self.next_key = k + 1;
        k
    }

    /// Entry `index` of render image `id`, GEM handle `handle`, is `object`. Returns whether it
    /// imports the buffer (another entry creates it) and the changes to earlier images.
    pub(crate) fn render(
        &mut self,
        id: u32,
        index: usize,
        handle: u32,
        object: ObjectId,
    ) -> Result<(bool, Vec<Patch>), GemError> {
        let mut patches = Vec::new();
        let waiting = self.pending.iter().any(|&(_, o)| o == object);
        let o = self.objects.entry(object).or_default();
        let import = o.kfd.is_some() || !o.renders.is_empty();
        if import {
            let key = match o.key {
                Some(k) => k,
                None => {
                    // A KFD BO that no file named yet: this handle names it.
                    if let Some((kid, kindex)) = o.kfd {
                        patches.push(Patch::KfdHandle {
                            id: kid,
                            index: kindex,
                            key: handle,
                        });
                    }
                    o.key = Some(handle);
                    handle
                }
            };
            if key != handle {
                return Err(GemError::Unshareable(format!(
                    "a buffer shared between processes is GEM handle {key} in one render-node \
                     file and {handle} in another (image {id}): the image format (upstream's) \
                     names a shared buffer by one handle number in every process"
                )));
            }
            o.shared = true;
            o.renders.push((id, index, handle));
            self.creators.entry(key).or_default().insert(object);
        } else {
            o.key = Some(handle);
            o.renders.push((id, index, handle));
            if waiting {
                o.shared = true;
            }
            self.creators.entry(handle).or_default().insert(object);
        }
        let key = handle;
        self.resolve_pending(object, key, &mut patches);
        self.check(key)?;
        Ok((import, patches))
    }

    /// BO `index` of KFD image `id` is `object`. Returns the changes to images.
    pub(crate) fn kfd(
        &mut self,
        id: u32,
        index: usize,
        object: ObjectId,
    ) -> Result<Vec<Patch>, GemError> {
        let mut patches = Vec::new();
        let waiting = self.pending.iter().any(|&(_, o)| o == object);
        let mut key = None;
        {
            let o = self.objects.entry(object).or_default();
            o.kfd = Some((id, index));
            if let Some(&(rid, rindex, handle)) = o.renders.first() {
                // A render entry seen first was taken for the creator: the KFD BO is.
                patches.push(Patch::RenderImport {
                    id: rid,
                    index: rindex,
                });
                o.shared = true;
                key = Some(handle);
            } else if waiting {
                o.shared = true;
            }
        }
        if key.is_none() && waiting {
            key = Some(self.fresh_key());
        }
        if let Some(k) = key {
            if let Some(o) = self.objects.get_mut(&object) {
                o.key = Some(k);
            }
            self.creators.entry(k).or_default().insert(object);
            patches.push(Patch::KfdHandle { id, index, key: k });
            self.resolve_pending(object, k, &mut patches);
            self.check(k)?;
        }
        Ok(patches)
    }

    /// Dma-buf image `id` is a dma-buf of `object`. Returns the changes to images (its own
    /// among them once its object is known).
    pub(crate) fn dmabuf(&mut self, id: u32, object: ObjectId) -> Result<Vec<Patch>, GemError> {
        let mut patches = Vec::new();
        let Some(o) = self.objects.get_mut(&object) else {
            self.pending.push((id, object));
            return Ok(patches);
        };
        o.shared = true;
        let key = match (o.key, o.kfd) {
            (Some(k), _) => k,
            (None, Some((kid, kindex))) => {
                let k = self.fresh_key();
                if let Some(o) = self.objects.get_mut(&object) {
                    o.key = Some(k);
                }
                self.creators.entry(k).or_default().insert(object);
                patches.push(Patch::KfdHandle {
                    id: kid,
                    index: kindex,
                    key: k,
                });
                k
            }
            (None, None) => {
                self.pending.push((id, object));
                return Ok(patches);
            }
        };
        patches.push(Patch::Dmabuf { id, key });
        self.check(key)?;
        Ok(patches)
    }

    /// Dma-buf images whose buffer no dumped file holds.
    pub(crate) fn unresolved(&self) -> Vec<u32> {
        self.pending.iter().map(|&(id, _)| id).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: ObjectId = (1, 10);
    const B: ObjectId = (1, 11);

    #[test]
    fn the_first_render_entry_creates_and_the_others_import() {
        let mut l = Ledger::default();
        assert_eq!(l.render(7, 0, 1, A).unwrap(), (false, vec![]));
        assert_eq!(l.render(9, 0, 1, A).unwrap(), (true, vec![]));
        // Another process's own buffer with the same number: not shared, fine.
        let err = l.render(11, 0, 1, B).unwrap_err().to_string();
        assert!(err.contains("cannot tell them apart"), "{err}");
    }

    #[test]
    fn a_kfd_bo_seen_after_its_render_entry_becomes_the_creator() {
        let mut l = Ledger::default();
        assert_eq!(l.render(7, 2, 3, A).unwrap(), (false, vec![]));
        assert_eq!(
            l.kfd(1, 5, A).unwrap(),
            vec![
                Patch::RenderImport { id: 7, index: 2 },
                Patch::KfdHandle {
                    id: 1,
                    index: 5,
                    key: 3
                }
            ]
        );
        // A KFD BO seen first: the render entry imports it and names it.
        assert_eq!(l.kfd(1, 6, B).unwrap(), vec![]);
        assert_eq!(
            l.render(8, 0, 4, B).unwrap(),
            (
                true,
                vec![Patch::KfdHandle {
                    id: 1,
                    index: 6,
                    key: 4
                }]
            )
        );
    }

    #[test]
    fn handles_that_differ_between_processes_cannot_be_named() {
        let mut l = Ledger::default();
        l.render(7, 0, 1, A).unwrap();
        let err = l.render(9, 0, 2, A).unwrap_err().to_string();
        assert!(
            err.contains("GEM handle 1 in one render-node file and 2"),
            "{err}"
        );
    }

    #[test]
    fn dma_bufs_wait_for_their_object() {
        let mut l = Ledger::default();
        assert_eq!(l.dmabuf(20, A).unwrap(), vec![]);
        assert_eq!(l.unresolved(), vec![20]);
        assert_eq!(
            l.render(7, 0, 5, A).unwrap(),
            (false, vec![Patch::Dmabuf { id: 20, key: 5 }])
        );
        assert!(l.unresolved().is_empty());
        // A KFD BO held only as a dma-buf gets a key of its own.
        l.kfd(1, 0, B).unwrap();
        assert_eq!(
            l.dmabuf(21, B).unwrap(),
            vec![
                Patch::KfdHandle {
                    id: 1,
                    index: 0,
                    key: FIRST_KFD_KEY
                },
                Patch::Dmabuf {
                    id: 21,
                    key: FIRST_KFD_KEY
                }
            ]
        );
    }
}
