//! The machine's canonical host name, which a listener bound to every
//! interface advertises, as Kafka advertises
//! `InetAddress.getLocalHost().getCanonicalHostName()`: the host name as the
//! resolver knows it, fully qualified where DNS or `/etc/hosts` says so.
//! Java finds it by a reverse lookup of the host's address, which on a
//! machine whose name maps to 127.0.0.1 answers `localhost`; the resolver's
//! canonical name (`getaddrinfo` with `AI_CANONNAME`) is the same on a
//! well-configured host and never that.

use std::ffi::{CStr, CString};
use std::sync::OnceLock;

/// Resolved once: the answer does not change while the broker runs, and a
/// slow resolver must not be asked on every Metadata request.
pub fn canonical() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        let Some(short) = host_name() else { return "localhost".to_owned() };
        resolve_canonical(&short).unwrap_or(short)
    })
}

/// `gethostname(2)`.
fn host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its whole length, which is what we pass.
    #[allow(unsafe_code)]
    let status = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if status != 0 {
        return None;
    }
    let name = CStr::from_bytes_until_nul(&buf).ok()?.to_str().ok()?;
    (!name.is_empty()).then(|| name.to_owned())
}

/// The canonical name `getaddrinfo(3)` gives `name` (`AI_CANONNAME`).
fn resolve_canonical(name: &str) -> Option<String> {
    let node = CString::new(name).ok()?;
    // SAFETY: an all-zero addrinfo is a valid "no hints" value.
    #[allow(unsafe_code)]
    let mut hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    hints.ai_flags = libc::AI_CANONNAME;
    hints.ai_socktype = libc::SOCK_STREAM;
    let mut found: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: `node` is NUL-terminated, `hints` initialized, and `found` is
    // freed below with freeaddrinfo once its first entry has been read.
    #[allow(unsafe_code)]
    unsafe {
        if libc::getaddrinfo(node.as_ptr(), std::ptr::null(), &hints, &mut found) != 0 || found.is_null() {
            return None;
        }
        let canonical = (*found).ai_canonname;
        let resolved = (!canonical.is_null())
            .then(|| CStr::from_ptr(canonical).to_str().ok().map(str::to_owned))
            .flatten();
        libc::freeaddrinfo(found);
        resolved.filter(|n| !n.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_name_starts_with_the_host_name() {
        let short = host_name().expect("the test machine has a host name");
        let canonical = canonical();
        // The resolver may qualify the name (`box` -> `box.example.org`),
        // never replace it with an unrelated one.
        let first_label = short.split('.').next().unwrap().to_ascii_lowercase();
        assert!(canonical.to_ascii_lowercase().starts_with(&first_label), "{short} -> {canonical}");
    }
}
