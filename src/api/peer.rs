//! Who is on the other end of the socket: SO_PEERCRED, and the group membership
//! that `socket_group` grants.

use std::os::fd::AsRawFd;

/// The peer's credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

pub fn peer_cred(sock: &impl AsRawFd) -> std::io::Result<PeerCred> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let Ok(mut len) = libc::socklen_t::try_from(std::mem::size_of::<libc::ucred>()) else {
        return Err(std::io::Error::other("struct ucred does not fit socklen_t"));
    };
    // SAFETY: `cred` is a valid, writable ucred and `len` holds its exact size, as
    // getsockopt(SO_PEERCRED) requires; the fd is owned by `sock` for the whole call.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(PeerCred { pid: cred.pid, uid: cred.uid, gid: cred.gid })
}

/// Resolve a group name (or a numeric gid) through /etc/group.
pub fn lookup_group(name: &str) -> Option<u32> {
    if let Ok(gid) = name.parse::<u32>() {
        return Some(gid);
    }
    let text = std::fs::read_to_string("/etc/group").ok()?;
    group_gid(&text, name)
}

fn group_gid(etc_group: &str, name: &str) -> Option<u32> {
    etc_group.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next()? == name).then_some(())?;
        f.next()?;
        f.next()?.parse().ok()
    })
}

/// Supplementary groups of a process, from `/proc/<pid>/status`.
fn proc_groups(pid: i32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Groups:"))
                .map(|g| g.split_whitespace().filter_map(|x| x.parse().ok()).collect())
        })
        .unwrap_or_default()
}

/// The effective uid of this process: the daemon's own user.
pub fn own_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Who may talk to the daemon: root, the user the daemon runs as (`own_uid`: the
/// README's quick start runs both as one normal user), and members of `socket_group`
/// (primary or supplementary group).
pub fn authorized(cred: &PeerCred, group: Option<u32>, own_uid: u32) -> bool {
    if cred.uid == 0 || cred.uid == own_uid {
        return true;
    }
    match group {
        Some(g) => cred.gid == g || proc_groups(cred.pid).contains(&g),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_lookup_reads_etc_group_format() {
        let text = "root:x:0:\nnodeportd:x:450:alice,bob\nadm:x:4:\n";
        assert_eq!(group_gid(text, "nodeportd"), Some(450));
        assert_eq!(group_gid(text, "adm"), Some(4));
        assert_eq!(group_gid(text, "nope"), None);
    }

    #[test]
    fn root_and_the_daemons_own_user_are_authorized_others_need_the_group() {
        let me = std::process::id() as i32;
        // The daemon runs as root.
        assert!(authorized(&PeerCred { pid: me, uid: 0, gid: 0 }, None, 0));
        assert!(!authorized(&PeerCred { pid: me, uid: 1000, gid: 1000 }, None, 0));
        assert!(authorized(&PeerCred { pid: me, uid: 1000, gid: 450 }, Some(450), 0));
        assert!(!authorized(&PeerCred { pid: i32::MAX, uid: 1000, gid: 1000 }, Some(450), 0));
        // The daemon runs as uid 1000 (the quick start): its own user, and root, may.
        assert!(authorized(&PeerCred { pid: me, uid: 1000, gid: 1000 }, None, 1000));
        assert!(authorized(&PeerCred { pid: me, uid: 0, gid: 0 }, None, 1000));
        assert!(!authorized(&PeerCred { pid: i32::MAX, uid: 1001, gid: 1001 }, None, 1000));
        assert!(authorized(&PeerCred { pid: i32::MAX, uid: 1001, gid: 450 }, Some(450), 1000));
    }

    #[test]
    fn peer_cred_of_a_socketpair_is_us() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let c = peer_cred(&a).unwrap();
        assert_eq!(c.pid, std::process::id() as i32);
        // SAFETY: getuid has no preconditions and cannot fail.
        assert_eq!(c.uid, unsafe { libc::getuid() });
    }
}
