/* Input of scripts/gen-bindings.sh: the uapi headers kfd-sys is generated from. */
#include <linux/kfd_ioctl.h>
#include <libdrm/drm.h>
#include <libdrm/amdgpu_drm.h>
