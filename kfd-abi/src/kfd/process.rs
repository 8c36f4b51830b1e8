//! The process on `/dev/kfd`: the interface version, the apertures of its GPUs, their clocks,
//! tiling and cache policies, scratch backing and trap handlers (the ioctls that set up a
//! process's view of a GPU before it allocates memory or queues).

use kfd_sys as sys;

use crate::error::{bad_reply, Result};
use crate::handle::DeviceFile;
use crate::ioctl::kfd::req;
use crate::transport::Transport;
use crate::types::GpuId;

use super::Kfd;

/// A version of the KFD ioctl interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    /// Major version (1).
    pub major: u32,
    /// Minor version (11 for Linux 6.1).
    pub minor: u32,
}

/// Clock counters of one GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ClockCounters {
    /// GPU clock.
    pub gpu: u64,
    /// CPU clock (CLOCK_MONOTONIC_RAW in ns).
    pub cpu: u64,
    /// System clock (CLOCK_BOOTTIME in ns).
    pub system: u64,
    /// Frequency of the system clock.
    pub system_freq: u64,
}

/// The apertures of one GPU in the process's address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Apertures {
    /// The GPU.
    pub gpu_id: u32,
    /// LDS aperture base.
    pub lds_base: u64,
    /// LDS aperture limit.
    pub lds_limit: u64,
    /// Scratch aperture base.
    pub scratch_base: u64,
    /// Scratch aperture limit.
    pub scratch_limit: u64,
    /// GPUVM aperture base.
    pub gpuvm_base: u64,
    /// GPUVM aperture limit.
    pub gpuvm_limit: u64,
}

impl From<&sys::kfd_process_device_apertures> for Apertures {
    fn from(a: &sys::kfd_process_device_apertures) -> Self {
        Self {
            gpu_id: a.gpu_id,
            lds_base: a.lds_base,
            lds_limit: a.lds_limit,
            scratch_base: a.scratch_base,
            scratch_limit: a.scratch_limit,
            gpuvm_base: a.gpuvm_base,
            gpuvm_limit: a.gpuvm_limit,
        }
    }
}

/// The tiling configuration of a GPU.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TileConfig {
    /// `GB_ADDR_CONFIG`.
    pub gb_addr_config: u32,
    /// Number of banks.
    pub num_banks: u32,
    /// Number of ranks.
    pub num_ranks: u32,
    /// Tile mode registers.
    pub tile_config: Vec<u32>,
    /// Macro tile mode registers.
    pub macro_tile_config: Vec<u32>,
}

/// Cache policy of `SET_MEMORY_POLICY`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum CachePolicy {
    /// `KFD_IOC_CACHE_POLICY_COHERENT`.
    Coherent = sys::KFD_IOC_CACHE_POLICY_COHERENT,
    /// `KFD_IOC_CACHE_POLICY_NONCOHERENT`.
    NonCoherent = sys::KFD_IOC_CACHE_POLICY_NONCOHERENT,
}

impl<T: Transport> Kfd<T> {
    /// The KFD ioctl interface version (`GET_VERSION`).
    pub fn get_version(&self) -> Result<Version> {
        let a = self.read(req::GET_VERSION)?;
        Ok(Version {
            major: a.major_version,
            minor: a.minor_version,
        })
    }

    /// Sets the default and alternate cache policy of a GPU (`SET_MEMORY_POLICY`).
    pub fn set_memory_policy(
        &self,
        gpu: GpuId,
        default: CachePolicy,
        alternate: CachePolicy,
        alternate_base: u64,
        alternate_size: u64,
    ) -> Result<()> {
        let a = sys::kfd_ioctl_set_memory_policy_args {
            alternate_aperture_base: alternate_base,
            alternate_aperture_size: alternate_size,
            gpu_id: gpu.get(),
            default_policy: default as u32,
            alternate_policy: alternate as u32,
            pad: 0,
        };
        self.write(req::SET_MEMORY_POLICY, &a)?;
        Ok(())
    }

    /// Reads the clock counters of a GPU (`GET_CLOCK_COUNTERS`).
    pub fn get_clock_counters(&self, gpu: GpuId) -> Result<ClockCounters> {
        let mut a = sys::kfd_ioctl_get_clock_counters_args {
            gpu_id: gpu.get(),
            ..Default::default()
        };
        self.read_write(req::GET_CLOCK_COUNTERS, &mut a)?;
        Ok(ClockCounters {
            gpu: a.gpu_clock_counter,
            cpu: a.cpu_clock_counter,
            system: a.system_clock_counter,
            system_freq: a.system_clock_freq,
        })
    }

    /// The apertures of up to 7 GPUs (`GET_PROCESS_APERTURES`, deprecated).
    pub fn get_process_apertures(&self) -> Result<Vec<Apertures>> {
        let a = self.read(req::GET_PROCESS_APERTURES)?;
        let n = a.num_of_nodes as usize;
        let rows = a.process_apertures.get(..n).ok_or_else(|| {
            bad_reply(
                "GET_PROCESS_APERTURES",
                &self.label,
                format!("{n} nodes (at most 7)"),
            )
        })?;
        Ok(rows.iter().map(Apertures::from).collect())
    }

    /// The apertures of every GPU of the process (`GET_PROCESS_APERTURES_NEW`, two calls).
    pub fn get_process_apertures_new(&self) -> Result<Vec<Apertures>> {
        let mut a = sys::kfd_ioctl_get_process_apertures_new_args::default();
        // SAFETY: with num_of_nodes 0 the driver only writes the count back.
        unsafe { self.call(req::GET_PROCESS_APERTURES_NEW, &mut a) }?;
        let n = a.num_of_nodes;
        if n == 0 {
            return Ok(Vec::new());
        }
        if n > 4096 {
            return Err(bad_reply(
                "GET_PROCESS_APERTURES_NEW",
                &self.label,
                format!("{n} nodes"),
            ));
        }
        let mut rows = vec![sys::kfd_process_device_apertures::default(); n as usize];
        a.kfd_process_device_apertures_ptr = rows.as_mut_ptr() as u64;
        // SAFETY: `rows` holds `num_of_nodes` entries for the driver to fill.
        unsafe { self.call(req::GET_PROCESS_APERTURES_NEW, &mut a) }?;
        rows.truncate(a.num_of_nodes.min(n) as usize);
        Ok(rows.iter().map(Apertures::from).collect())
    }

    /// Sets the scratch backing address of a GPU (`SET_SCRATCH_BACKING_VA`).
    pub fn set_scratch_backing_va(&self, gpu: GpuId, va: u64) -> Result<()> {
        let mut a = sys::kfd_ioctl_set_scratch_backing_va_args {
            va_addr: va,
            gpu_id: gpu.get(),
            pad: 0,
        };
        self.read_write(req::SET_SCRATCH_BACKING_VA, &mut a)?;
        Ok(())
    }

    /// The tiling configuration of a GPU (`GET_TILE_CONFIG`, two calls).
    pub fn get_tile_config(&self, gpu: GpuId) -> Result<TileConfig> {
        let mut a = sys::kfd_ioctl_get_tile_config_args {
            gpu_id: gpu.get(),
            ..Default::default()
        };
        // SAFETY: with zero counts the driver only reports the counts.
        unsafe { self.call(req::GET_TILE_CONFIG, &mut a) }?;
        let (nt, nm) = (a.num_tile_configs.min(64), a.num_macro_tile_configs.min(64));
        let mut tile = vec![0u32; nt as usize];
        let mut macro_tile = vec![0u32; nm as usize];
        if nt > 0 || nm > 0 {
            a.tile_config_ptr = tile.as_mut_ptr() as u64;
            a.macro_tile_config_ptr = macro_tile.as_mut_ptr() as u64;
            a.num_tile_configs = nt;
            a.num_macro_tile_configs = nm;
            // SAFETY: the arrays hold the counts given for the driver to fill.
            unsafe { self.call(req::GET_TILE_CONFIG, &mut a) }?;
            tile.truncate(a.num_tile_configs.min(nt) as usize);
            macro_tile.truncate(a.num_macro_tile_configs.min(nm) as usize);
        }
        Ok(TileConfig {
            gb_addr_config: a.gb_addr_config,
            num_banks: a.num_banks,
            num_ranks: a.num_ranks,
            tile_config: tile,
            macro_tile_config: macro_tile,
        })
    }

    /// Installs the trap handler of a GPU (`SET_TRAP_HANDLER`).
    pub fn set_trap_handler(&self, gpu: GpuId, tba: u64, tma: u64) -> Result<()> {
        let a = sys::kfd_ioctl_set_trap_handler_args {
            tba_addr: tba,
            tma_addr: tma,
            gpu_id: gpu.get(),
            pad: 0,
        };
        self.write(req::SET_TRAP_HANDLER, &a)?;
        Ok(())
    }

    /// Tells the driver the runtime is up (`enable`, with the trap temporaries set up when
    /// `ttmp_setup`; `r_debug` is where the runtime keeps what it shares with a debugger) or down
    /// (`AMDKFD_IOC_RUNTIME_ENABLE`, KFD 1.13; Linux 6.2 and later). ROCr enables it before it
    /// creates a queue and disables it when it shuts down.
    ///
    /// # Errors
    ///
    /// `ENOTTY` on a KFD older than 1.13 (Linux 6.1); `EBUSY` enabling a runtime that is already
    /// enabled; `EEXIST` enabling it while the process has queues.
    pub fn runtime_enable(&self, enable: bool, r_debug: u64, ttmp_setup: bool) -> Result<()> {
        use crate::uapi618::{
            KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK as ENABLE,
            KFD_RUNTIME_ENABLE_MODE_TTMP_SAVE_MASK as TTMP,
        };
        let mut a = crate::uapi618::kfd_ioctl_runtime_enable_args {
            r_debug,
            mode_mask: if enable { ENABLE } else { 0 } | if ttmp_setup { TTMP } else { 0 },
            capabilities_mask: 0,
        };
        self.read_write(crate::ioctl::linux618::kfd::req::RUNTIME_ENABLE, &mut a)?;
        Ok(())
    }
}
