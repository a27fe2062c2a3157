//! The linker: every interface a plugin may import, and the FIFO guard on
//! `open-at`.

use wasmtime::component::{HasSelf, Linker};

use super::StoreState;
use crate::plugins::bindings::{v0_1, v0_2};

/// Adds every interface a plugin may import to `linker`: WASI p2 (with the
/// deny-by-default context of [`StoreState`]), `wasi:http` (policy in [`HttpPolicy`](crate::plugins::http::HttpPolicy)),
/// and `chitin:plugin/host` of 0.1.0 and 0.2.0 side by side (a 0.x minor is
/// its own semver track, so each component resolves to the version it was
/// built against). `wasi:sockets` is linked so that components from
/// language toolchains that always import it still instantiate; the context
/// refuses every address and lookup, so no socket ever opens.
pub fn add_to_linker(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_async(linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)?;
    v0_1::chitin::plugin::host::add_to_linker::<StoreState, HasSelf<StoreState>>(linker, |s| s)?;
    v0_2::tool::chitin::plugin::host::add_to_linker::<StoreState, HasSelf<StoreState>>(linker, |s| s)?;
    // Privileged interfaces: linked for all, each call checks the grant.
    v0_2::messaging::add_to_linker::<StoreState, HasSelf<StoreState>>(linker, |s| s)?;
    v0_2::agents::add_to_linker::<StoreState, HasSelf<StoreState>>(linker, |s| s)?;
    v0_2::schedule::add_to_linker::<StoreState, HasSelf<StoreState>>(linker, |s| s)?;
    v0_2::goals::add_to_linker::<StoreState, HasSelf<StoreState>>(linker, |s| s)?;
    guard_open_at(linker)
}

/// The WASI filesystem version wasmtime-wasi links (components importing any
/// 0.2.x resolve to it).
const WASI_FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

/// Replaces `descriptor.open-at` with one that refuses anything but a
/// directory or a regular file before opening it. Only host-side actors can
/// put a FIFO or device in the workspace (WASI cannot make one), but opening
/// a FIFO blocks the host thread that does it until a writer appears, and a
/// call's timeout cannot unblock a thread: the process would never exit.
fn guard_open_at(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
    use wasmtime::component::Resource;
    use wasmtime_wasi::filesystem::WasiFilesystemView;
    use wasmtime_wasi::p2::bindings::filesystem::types::{
        self as fs, Descriptor, DescriptorFlags, DescriptorType, HostDescriptor, OpenFlags, PathFlags,
    };
    type Args = (Resource<Descriptor>, PathFlags, String, OpenFlags, DescriptorFlags);
    linker.allow_shadowing(true);
    let mut types = linker.instance(WASI_FILESYSTEM_TYPES)?;
    types.func_wrap_async("[method]descriptor.open-at", |mut store, (fd, path_flags, path, oflags, flags): Args| {
        Box::new(async move {
            let state: &mut StoreState = store.data_mut();
            let probe = Resource::<Descriptor>::new_borrow(fd.rep());
            // Probe whatever exists at the path, following links as the open
            // would (`create` on an existing FIFO still opens the FIFO).
            if let Ok(stat) = state.filesystem().stat_at(probe, path_flags, path.clone()).await
                && !matches!(stat.type_, DescriptorType::Directory | DescriptorType::RegularFile | DescriptorType::SymbolicLink)
            {
                tracing::warn!(plugin = &*state.host.plugin, %path, kind = ?stat.type_, "refused to open a special file in the workspace");
                return Ok((Err(fs::ErrorCode::Access),));
            }
            let mut fs_view = state.filesystem();
            match fs_view.open_at(fd, path_flags, path, oflags, flags).await {
                Ok(opened) => Ok((Ok(opened),)),
                Err(e) => Ok((Err(fs::Host::convert_error_code(&mut fs_view, e)?),)),
            }
        })
    })?;
    linker.allow_shadowing(false);
    Ok(())
}
