//! File names of the plugin's images, exactly as the upstream plugin spells them.
//!
//! Upstream formats the image id and the render minor with C's `%d` of an `int`; ids are CRIU
//! object ids (small positive numbers), but to stay byte-identical for every value we print the
//! bit pattern as a signed 32-bit number, as `%d` would. gpu ids and BO indices use `%04x`.

use std::fmt;

/// Prints a `u32` as C's `printf("%d", (int)v)` does.
fn c_int(v: u32) -> i32 {
    i32::from_ne_bytes(v.to_ne_bytes())
}

/// `amdgpu-kfd-<id>.img`: the framed `criu_kfd` message.
pub fn kfd_image(id: u32) -> String {
    format!("amdgpu-kfd-{}.img", c_int(id))
}

/// `amdgpu-renderD-<id>.img`: the framed `criu_render_node` message.
pub fn render_node_image(id: u32) -> String {
    format!("amdgpu-renderD-{}.img", c_int(id))
}

/// `amdgpu-dmabuf_<id>.img`: the framed `criu_dmabuf_node` message.
pub fn dmabuf_image(id: u32) -> String {
    format!("amdgpu-dmabuf_{}.img", c_int(id))
}

/// `amdgpu-pages-<id>-<gpu_id as %04x>.img`: the VRAM and GTT BO contents of one GPU.
pub fn kfd_pages(id: u32, gpu_id: u32) -> String {
    format!("amdgpu-pages-{}-{gpu_id:04x}.img", c_int(id))
}

/// `amdgpu-drm-pages-<id>-<minor>-<index as %04x>.img`: the contents of one render-node BO.
pub fn drm_pages(id: u32, minor: u32, index: u32) -> String {
    format!(
        "amdgpu-drm-pages-{}-{}-{index:04x}.img",
        c_int(id),
        c_int(minor)
    )
}

/// Which pages file: names it and gives the key its checksums are stored under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PagesFile {
    /// The VRAM/GTT contents of one GPU of a `/dev/kfd` file: [`kfd_pages`].
    Kfd {
        /// CRIU's id of the `/dev/kfd` file.
        id: u32,
        /// The GPU's id (actual at dump, the image's user id at restore).
        gpu_id: u32,
    },
    /// One BO of a render node: [`drm_pages`].
    Drm {
        /// CRIU's id of the render-node file.
        id: u32,
        /// The render node's minor.
        minor: u32,
        /// The BO's index in `criu_render_node.bo_entries`.
        index: u32,
    },
}

impl PagesFile {
    /// The file name in the image directory.
    pub fn file_name(&self) -> String {
        match *self {
            Self::Kfd { id, gpu_id } => kfd_pages(id, gpu_id),
            Self::Drm { id, minor, index } => drm_pages(id, minor, index),
        }
    }

    /// `pages_checksums.file_key` of this file: the gpu_id, or the BO index.
    pub(crate) fn file_key(&self) -> u32 {
        match *self {
            Self::Kfd { gpu_id, .. } => gpu_id,
            Self::Drm { index, .. } => index,
        }
    }
}

impl fmt::Display for PagesFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(kfd_image(7), "amdgpu-kfd-7.img")]
    #[case(render_node_image(12), "amdgpu-renderD-12.img")]
    #[case(dmabuf_image(3), "amdgpu-dmabuf_3.img")]
    #[case(kfd_pages(7, 0xabc), "amdgpu-pages-7-0abc.img")]
    #[case(kfd_pages(7, 0x1_2345), "amdgpu-pages-7-12345.img")]
    #[case(drm_pages(9, 128, 2), "amdgpu-drm-pages-9-128-0002.img")]
    #[case(drm_pages(9, 129, 0x1f), "amdgpu-drm-pages-9-129-001f.img")]
    #[case(kfd_image(u32::MAX), "amdgpu-kfd--1.img")]
    fn names_match_upstream(#[case] got: String, #[case] want: &str) {
        assert_eq!(got, want);
    }

    #[test]
    fn pages_file_keys() {
        let k = PagesFile::Kfd {
            id: 1,
            gpu_id: 0x1234,
        };
        assert_eq!(
            (k.file_name().as_str(), k.file_key()),
            ("amdgpu-pages-1-1234.img", 0x1234)
        );
        let d = PagesFile::Drm {
            id: 2,
            minor: 130,
            index: 5,
        };
        assert_eq!(
            (d.to_string().as_str(), d.file_key()),
            ("amdgpu-drm-pages-2-130-0005.img", 5)
        );
    }
}
