//! [`Mechanism`] over the system's GSSAPI library: MIT Kerberos' `libgssapi_krb5.so.2`,
//! loaded with `dlopen` (libloading) when the first GSSAPI connection opens, never linked:
//! building needs no Kerberos headers, no bindgen and no C compiler, and a build with the
//! `gssapi` feature still runs on a host without Kerberos until GSSAPI is asked for (then it
//! says which package to install).
//!
//! The calls, with the signatures of RFC 2744 (GSS-API v2 C bindings) and MIT's
//! `gss_acquire_cred_from` (its credential store extension, MIT 1.11+):
//! `gss_import_name`, `gss_acquire_cred` / `gss_acquire_cred_from`, `gss_init_sec_context`,
//! `gss_wrap`, `gss_unwrap`, `gss_display_status` and the `gss_release_*` /
//! `gss_delete_sec_context` that free what they return.
//!
//! Credentials: with `sasl.kerberos.keytab`, `gss_acquire_cred_from` with the store
//! `client_keytab=KEYTAB` and `ccache=MEMORY:kdirect-…`: MIT gets the tickets from the KDC
//! with the keytab's key when they are needed, keeps them in a memory cache of this process
//! (shared by its connections, gone when it exits; the user's ticket cache is not touched)
//! — the Java client's `useKeyTab=true` with `storeKey`. Without a keytab, `gss_acquire_cred` from the default ticket cache
//! (`KRB5CCNAME`, or krb5.conf's `default_ccache_name`), which `kinit` filled.
//!
//! Each authentication — a new connection, or a KIP-368 re-authentication in place — is a new
//! `System`: credentials acquired and a context started anew. With a keytab, MIT gets a new
//! TGT from it when the memory cache's is expired or near its end (after half its lifetime,
//! or when it ends within 30 s), so the
//! login outlives its tickets (the Java client's Krb5LoginModule re-login); a ticket cache
//! whose ticket expired fails with `KerberosFailure::Expired`.
//!
//! This is the one module of the engine with `unsafe` besides the decoder's window read
//! (ARCHITECTURE.md, "Unsafe code"): each block is one call into the library with buffers
//! that live across it, and every buffer the library returns is copied and released at once.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_void, CString};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::OnceLock;

use super::{classify, Init, Mechanism};
use crate::error::{KerberosFailure, KerberosProblem};

/// The library names tried, in order: MIT Kerberos' runtime library (Debian's
/// `libgssapi-krb5-2`, Fedora's `krb5-libs`), then its development symlink.
const LIBRARIES: &[&str] = &["libgssapi_krb5.so.2", "libgssapi_krb5.so"];

type Om = u32;
type Name = *mut c_void;
type Ctx = *mut c_void;
type Cred = *mut c_void;

/// `gss_buffer_desc`.
#[repr(C)]
struct Buffer {
    length: usize,
    value: *mut c_void,
}

impl Buffer {
    fn empty() -> Buffer {
        Buffer {
            length: 0,
            value: ptr::null_mut(),
        }
    }

    /// A buffer over `bytes`, which the library only reads.
    fn of(bytes: &[u8]) -> Buffer {
        Buffer {
            length: bytes.len(),
            value: bytes.as_ptr().cast_mut().cast(),
        }
    }
}

/// `gss_OID_desc`.
#[repr(C)]
struct Oid {
    length: Om,
    elements: *mut c_void,
}

/// `gss_OID_set_desc`.
#[repr(C)]
struct OidSet {
    count: usize,
    elements: *mut Oid,
}

/// `gss_key_value_element_desc`.
#[repr(C)]
struct KeyValue {
    key: *const c_char,
    value: *const c_char,
}

/// `gss_key_value_set_desc`.
#[repr(C)]
struct KeyValueSet {
    count: Om,
    elements: *const KeyValue,
}

/// An OID in static memory. The library reads OIDs and copies what it keeps.
struct StaticOid(Oid);
// SAFETY: the pointer is to immutable static bytes, never written through.
unsafe impl Sync for StaticOid {}

impl StaticOid {
    fn ptr(&'static self) -> *mut Oid {
        ptr::addr_of!(self.0).cast_mut()
    }
}

/// 1.2.840.113554.1.2.2: the Kerberos V5 mechanism.
static KRB5_MECHANISM: StaticOid = StaticOid(Oid {
    length: 9,
    elements: b"\x2a\x86\x48\x86\xf7\x12\x01\x02\x02"
        .as_ptr()
        .cast_mut()
        .cast(),
});
/// 1.2.840.113554.1.2.1.4: `GSS_C_NT_HOSTBASED_SERVICE` (`service@host`).
static NT_HOSTBASED_SERVICE: StaticOid = StaticOid(Oid {
    length: 10,
    elements: b"\x2a\x86\x48\x86\xf7\x12\x01\x02\x01\x04"
        .as_ptr()
        .cast_mut()
        .cast(),
});
/// 1.2.840.113554.1.2.2.1: `GSS_KRB5_NT_PRINCIPAL_NAME` (`alice@REALM`).
static NT_KRB5_PRINCIPAL: StaticOid = StaticOid(Oid {
    length: 10,
    elements: b"\x2a\x86\x48\x86\xf7\x12\x01\x02\x02\x01"
        .as_ptr()
        .cast_mut()
        .cast(),
});

const GSS_C_INITIATE: c_int = 1;
const GSS_C_MUTUAL_FLAG: Om = 2;
const GSS_C_SEQUENCE_FLAG: Om = 8;
const GSS_C_INTEG_FLAG: Om = 32;
const GSS_C_GSS_CODE: c_int = 1;
const GSS_C_MECH_CODE: c_int = 2;
const GSS_S_CONTINUE_NEEDED: Om = 1;

fn is_error(major: Om) -> bool {
    major & 0xffff_0000 != 0
}

type ImportName = unsafe extern "C" fn(*mut Om, *mut Buffer, *mut Oid, *mut Name) -> Om;
type ReleaseName = unsafe extern "C" fn(*mut Om, *mut Name) -> Om;
type AcquireCred = unsafe extern "C" fn(
    *mut Om,
    Name,
    Om,
    *mut OidSet,
    c_int,
    *mut Cred,
    *mut *mut OidSet,
    *mut Om,
) -> Om;
type AcquireCredFrom = unsafe extern "C" fn(
    *mut Om,
    Name,
    Om,
    *mut OidSet,
    c_int,
    *const KeyValueSet,
    *mut Cred,
    *mut *mut OidSet,
    *mut Om,
) -> Om;
type ReleaseCred = unsafe extern "C" fn(*mut Om, *mut Cred) -> Om;
type InitSecContext = unsafe extern "C" fn(
    *mut Om,
    Cred,
    *mut Ctx,
    Name,
    *mut Oid,
    Om,
    Om,
    *mut c_void,
    *mut Buffer,
    *mut *mut Oid,
    *mut Buffer,
    *mut Om,
    *mut Om,
) -> Om;
type DeleteSecContext = unsafe extern "C" fn(*mut Om, *mut Ctx, *mut Buffer) -> Om;
type Wrap =
    unsafe extern "C" fn(*mut Om, Ctx, c_int, Om, *mut Buffer, *mut c_int, *mut Buffer) -> Om;
type Unwrap =
    unsafe extern "C" fn(*mut Om, Ctx, *mut Buffer, *mut Buffer, *mut c_int, *mut Om) -> Om;
type ReleaseBuffer = unsafe extern "C" fn(*mut Om, *mut Buffer) -> Om;
type DisplayStatus = unsafe extern "C" fn(*mut Om, Om, c_int, *mut Oid, *mut Om, *mut Buffer) -> Om;

/// The library and the functions kdirect calls. Loaded once per process and never unloaded
/// (the function pointers stay valid for the process's life).
struct Gss {
    _library: libloading::Library,
    import_name: ImportName,
    release_name: ReleaseName,
    acquire_cred: AcquireCred,
    acquire_cred_from: Option<AcquireCredFrom>,
    release_cred: ReleaseCred,
    init_sec_context: InitSecContext,
    delete_sec_context: DeleteSecContext,
    wrap: Wrap,
    unwrap: Unwrap,
    release_buffer: ReleaseBuffer,
    display_status: DisplayStatus,
}

impl Gss {
    fn load() -> Result<Gss, String> {
        let mut tried = Vec::new();
        for name in LIBRARIES {
            // SAFETY: loading MIT's GSSAPI library runs its initialisers, which only set up
            // its own error tables and mechanism list.
            match unsafe { libloading::Library::new(*name) } {
                Ok(library) => return Gss::with(library).map_err(|e| format!("{name}: {e}")),
                Err(e) => tried.push(e.to_string()),
            }
        }
        Err(format!(
            "could not load the system's GSSAPI library ({}); install MIT Kerberos' \
             libgssapi-krb5-2 (Debian, Ubuntu) or krb5-libs (Fedora, RHEL)",
            tried.join("; ")
        ))
    }

    fn with(library: libloading::Library) -> Result<Gss, libloading::Error> {
        // SAFETY: each symbol is read with the type of its RFC 2744 / MIT prototype (above).
        unsafe {
            Ok(Gss {
                import_name: *library.get::<ImportName>(b"gss_import_name\0")?,
                release_name: *library.get::<ReleaseName>(b"gss_release_name\0")?,
                acquire_cred: *library.get::<AcquireCred>(b"gss_acquire_cred\0")?,
                acquire_cred_from: library
                    .get::<AcquireCredFrom>(b"gss_acquire_cred_from\0")
                    .ok()
                    .map(|s| *s),
                release_cred: *library.get::<ReleaseCred>(b"gss_release_cred\0")?,
                init_sec_context: *library.get::<InitSecContext>(b"gss_init_sec_context\0")?,
                delete_sec_context: *library
                    .get::<DeleteSecContext>(b"gss_delete_sec_context\0")?,
                wrap: *library.get::<Wrap>(b"gss_wrap\0")?,
                unwrap: *library.get::<Unwrap>(b"gss_unwrap\0")?,
                release_buffer: *library.get::<ReleaseBuffer>(b"gss_release_buffer\0")?,
                display_status: *library.get::<DisplayStatus>(b"gss_display_status\0")?,
                _library: library,
            })
        }
    }

    /// Copies and releases a buffer the library returned.
    fn take(&self, buffer: &mut Buffer) -> Vec<u8> {
        let bytes = if buffer.value.is_null() || buffer.length == 0 {
            Vec::new()
        } else {
            // SAFETY: the library returned `length` bytes at `value`.
            unsafe { std::slice::from_raw_parts(buffer.value.cast::<u8>(), buffer.length) }.to_vec()
        };
        let mut minor = 0;
        // SAFETY: releases what the library allocated; a null buffer is a no-op.
        unsafe { (self.release_buffer)(&mut minor, buffer) };
        bytes
    }

    /// `gss_display_status` for one code, every message of it joined.
    fn status_text(&self, code: Om, kind: c_int) -> String {
        let mut parts = Vec::new();
        let mut more: Om = 0;
        // A library that keeps saying "more" stops after a few messages.
        for _ in 0..8 {
            let (mut minor, mut text) = (0, Buffer::empty());
            // SAFETY: out-parameters are ours; the mechanism OID is static.
            let major = unsafe {
                (self.display_status)(
                    &mut minor,
                    code,
                    kind,
                    KRB5_MECHANISM.ptr(),
                    &mut more,
                    &mut text,
                )
            };
            let bytes = self.take(&mut text);
            if is_error(major) {
                break;
            }
            let line = String::from_utf8_lossy(&bytes).trim().to_owned();
            if !line.is_empty() {
                parts.push(line);
            }
            if more == 0 {
                break;
            }
        }
        parts.join("; ")
    }

    /// The typed error for a failed call: both statuses in the library's words (read on the
    /// thread that made the call: MIT keeps the detailed minor message per thread).
    fn problem(
        &self,
        step: &'static str,
        major: Om,
        minor: Om,
        principal: Option<String>,
    ) -> KerberosProblem {
        let major_text = self.status_text(major, GSS_C_GSS_CODE);
        let minor_text = if minor != 0 {
            self.status_text(minor, GSS_C_MECH_CODE)
        } else {
            String::new()
        };
        // GSS_S_FAILURE's text only says to read the minor status's.
        let unspecified = (major >> 16) & 0xff == 13;
        let status = match (major_text.is_empty(), minor_text.is_empty()) {
            (_, true) => major_text,
            (true, false) => minor_text,
            (false, false) if unspecified => minor_text,
            (false, false) => format!("{major_text}: {minor_text}"),
        };
        KerberosProblem {
            failure: classify(major, minor),
            step,
            principal,
            major,
            minor,
            status,
        }
    }

    /// `gss_import_name`.
    fn import(&self, text: &str, kind: &'static StaticOid) -> Result<Name, (Om, Om)> {
        let (mut minor, mut name) = (0, ptr::null_mut());
        let mut buffer = Buffer::of(text.as_bytes());
        // SAFETY: the input buffer lives across the call; `name` is ours to release.
        let major = unsafe { (self.import_name)(&mut minor, &mut buffer, kind.ptr(), &mut name) };
        if is_error(major) {
            Err((major, minor))
        } else {
            Ok(name)
        }
    }
}

/// The process's library, loaded on first use.
fn library() -> Result<&'static Gss, KerberosProblem> {
    static GSS: OnceLock<Result<Gss, String>> = OnceLock::new();
    GSS.get_or_init(Gss::load)
        .as_ref()
        .map_err(|e| KerberosProblem {
            failure: KerberosFailure::Library,
            step: "dlopen",
            principal: None,
            major: 0,
            minor: 0,
            status: e.clone(),
        })
}

/// One GSSAPI security context with the system library.
pub(crate) struct System {
    /// `service@host`.
    service: String,
    principal: Option<String>,
    keytab: Option<PathBuf>,
    /// The library, once loaded (what `Drop` releases the handles with).
    gss: Option<&'static Gss>,
    /// Names imported and credentials acquired.
    prepared: bool,
    cred: Cred,
    target: Name,
    context: Ctx,
}

// SAFETY: the handles are used by one thread at a time (the exchange is driven step by step,
// each step on whichever thread runs it); MIT's GSSAPI keeps no thread affinity for them.
unsafe impl Send for System {}

impl System {
    /// A context for `service@host` as `principal` (with `keytab`, or from the ticket cache).
    /// Nothing is loaded or acquired until the first `init`.
    pub(crate) fn new(
        service: &str,
        host: &str,
        principal: Option<&str>,
        keytab: Option<&Path>,
    ) -> System {
        System {
            service: format!("{service}@{host}"),
            principal: principal.map(str::to_owned),
            keytab: keytab.map(Path::to_path_buf),
            gss: None,
            prepared: false,
            cred: ptr::null_mut(),
            target: ptr::null_mut(),
            context: ptr::null_mut(),
        }
    }

    /// Who the credentials are for, in errors.
    fn client(&self) -> Option<String> {
        self.principal.clone().or_else(|| {
            Some(match std::env::var("KRB5CCNAME") {
                Ok(cache) if !cache.is_empty() => format!("ticket cache {cache}"),
                _ => "the default ticket cache".to_owned(),
            })
        })
    }

    /// Loads the library, imports the names and acquires the credentials.
    fn prepare(&mut self) -> Result<&'static Gss, KerberosProblem> {
        if let (true, Some(gss)) = (self.prepared, self.gss) {
            return Ok(gss);
        }
        if self.gss.is_some() {
            return Err(KerberosProblem {
                failure: KerberosFailure::Protocol,
                step: "gss_acquire_cred",
                principal: self.client(),
                major: 0,
                minor: 0,
                status: "the credentials could not be acquired before".to_owned(),
            });
        }
        let gss = library()?;
        self.gss = Some(gss);
        self.target =
            gss.import(&self.service, &NT_HOSTBASED_SERVICE)
                .map_err(|(major, minor)| {
                    gss.problem("gss_import_name", major, minor, Some(self.service.clone()))
                })?;
        let mut desired: Name = ptr::null_mut();
        if let Some(p) = &self.principal {
            desired = gss
                .import(p, &NT_KRB5_PRINCIPAL)
                .map_err(|(major, minor)| {
                    gss.problem("gss_import_name", major, minor, Some(p.clone()))
                })?;
        }
        let result = self.acquire(gss, desired);
        if !desired.is_null() {
            let mut minor = 0;
            // SAFETY: releases the name imported above.
            unsafe { (gss.release_name)(&mut minor, &mut desired) };
        }
        result?;
        self.prepared = true;
        Ok(gss)
    }

    fn acquire(&mut self, gss: &'static Gss, desired: Name) -> Result<(), KerberosProblem> {
        let mut minor = 0;
        let mut mechanisms = OidSet {
            count: 1,
            elements: KRB5_MECHANISM.ptr(),
        };
        let (major, step) = match &self.keytab {
            None => {
                // SAFETY: every pointer is to a live local or static; `cred` is ours.
                let major = unsafe {
                    (gss.acquire_cred)(
                        &mut minor,
                        desired,
                        0,
                        &mut mechanisms,
                        GSS_C_INITIATE,
                        &mut self.cred,
                        ptr::null_mut(),
                        ptr::null_mut(),
                    )
                };
                (major, "gss_acquire_cred")
            }
            Some(keytab) => {
                let Some(acquire_from) = gss.acquire_cred_from else {
                    return Err(KerberosProblem {
                        failure: KerberosFailure::Library,
                        step: "gss_acquire_cred_from",
                        principal: self.principal.clone(),
                        major: 0,
                        minor: 0,
                        status: "the GSSAPI library has no gss_acquire_cred_from (MIT Kerberos \
                                 1.11 or later has it), which a keytab login needs"
                            .to_owned(),
                    });
                };
                let c = |s: &str| CString::new(s).ok();
                let cache = memory_cache(self.principal.as_deref().unwrap_or(""), keytab);
                let (Some(k_keytab), Some(v_keytab), Some(k_cache), Some(v_cache)) = (
                    c("client_keytab"),
                    c(&keytab.to_string_lossy()),
                    c("ccache"),
                    c(&cache),
                ) else {
                    return Err(KerberosProblem {
                        failure: KerberosFailure::Keytab,
                        step: "gss_acquire_cred_from",
                        principal: self.principal.clone(),
                        major: 0,
                        minor: 0,
                        status: format!("{}: a NUL byte in the path", keytab.display()),
                    });
                };
                let elements = [
                    KeyValue {
                        key: k_keytab.as_ptr(),
                        value: v_keytab.as_ptr(),
                    },
                    KeyValue {
                        key: k_cache.as_ptr(),
                        value: v_cache.as_ptr(),
                    },
                ];
                let store = KeyValueSet {
                    count: 2,
                    elements: elements.as_ptr(),
                };
                // SAFETY: the store's strings live across the call; `cred` is ours.
                let major = unsafe {
                    acquire_from(
                        &mut minor,
                        desired,
                        0,
                        &mut mechanisms,
                        GSS_C_INITIATE,
                        &store,
                        &mut self.cred,
                        ptr::null_mut(),
                        ptr::null_mut(),
                    )
                };
                (major, "gss_acquire_cred_from")
            }
        };
        if is_error(major) {
            let mut problem = gss.problem(step, major, minor, self.client());
            // With a keytab, "no credentials" means the keytab has none for the principal
            // (MIT reports the empty memory cache it looked in first).
            if self.keytab.is_some() && problem.failure == KerberosFailure::NoCredentials {
                problem.failure = KerberosFailure::Keytab;
            }
            return Err(problem);
        }
        Ok(())
    }
}

/// The memory ticket cache of a keytab login: one per process, principal and keytab, so the
/// connections of one consumer share their tickets.
fn memory_cache(principal: &str, keytab: &Path) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (principal, keytab).hash(&mut h);
    format!("MEMORY:kdirect-{}-{:016x}", std::process::id(), h.finish())
}

impl Mechanism for System {
    fn init(&mut self, input: Option<&[u8]>) -> Result<Init, KerberosProblem> {
        let gss = self.prepare()?;
        let mut minor = 0;
        let mut input_buffer = input.map(Buffer::of);
        let input_ptr = input_buffer.as_mut().map_or(ptr::null_mut(), ptr::from_mut);
        let (mut output, mut flags) = (Buffer::empty(), 0);
        // SAFETY: the input token lives across the call; the context, output buffer and
        // flags are ours; no channel bindings, no returned mechanism or lifetime.
        let major = unsafe {
            (gss.init_sec_context)(
                &mut minor,
                self.cred,
                &mut self.context,
                self.target,
                KRB5_MECHANISM.ptr(),
                GSS_C_MUTUAL_FLAG | GSS_C_SEQUENCE_FLAG | GSS_C_INTEG_FLAG,
                0,
                ptr::null_mut(),
                input_ptr,
                ptr::null_mut(),
                &mut output,
                &mut flags,
                ptr::null_mut(),
            )
        };
        let token = gss.take(&mut output);
        if is_error(major) {
            // Credential failures concern the client; the rest, the service asked for.
            let problem = gss.problem(
                "gss_init_sec_context",
                major,
                minor,
                Some(self.service.clone()),
            );
            return Err(match problem.failure {
                KerberosFailure::NoCredentials
                | KerberosFailure::Keytab
                | KerberosFailure::UnknownClient
                | KerberosFailure::WrongKey
                | KerberosFailure::Expired => KerberosProblem {
                    principal: self.client(),
                    ..problem
                },
                _ => problem,
            });
        }
        Ok(Init {
            token,
            complete: major & GSS_S_CONTINUE_NEEDED == 0,
            mutual: flags & GSS_C_MUTUAL_FLAG != 0,
        })
    }

    fn unwrap(&mut self, token: &[u8]) -> Result<Vec<u8>, KerberosProblem> {
        let gss = self.prepare()?;
        let (mut minor, mut input, mut output) = (0, Buffer::of(token), Buffer::empty());
        let (mut conf, mut qop) = (0, 0);
        // SAFETY: the input lives across the call; the output is ours and released by take.
        let major = unsafe {
            (gss.unwrap)(
                &mut minor,
                self.context,
                &mut input,
                &mut output,
                &mut conf,
                &mut qop,
            )
        };
        let plain = gss.take(&mut output);
        if is_error(major) {
            return Err(gss.problem("gss_unwrap", major, minor, Some(self.service.clone())));
        }
        Ok(plain)
    }

    fn wrap(&mut self, message: &[u8]) -> Result<Vec<u8>, KerberosProblem> {
        let gss = self.prepare()?;
        let (mut minor, mut input, mut output) = (0, Buffer::of(message), Buffer::empty());
        let mut conf = 0;
        // SAFETY: as in unwrap; no confidentiality (conf_req_flag 0), default QOP.
        let major = unsafe {
            (gss.wrap)(
                &mut minor,
                self.context,
                0,
                0,
                &mut input,
                &mut conf,
                &mut output,
            )
        };
        let wrapped = gss.take(&mut output);
        if is_error(major) {
            return Err(gss.problem("gss_wrap", major, minor, Some(self.service.clone())));
        }
        Ok(wrapped)
    }

    fn service(&self) -> &str {
        &self.service
    }
}

impl Drop for System {
    fn drop(&mut self) {
        let Some(gss) = self.gss else { return };
        let mut minor = 0;
        // SAFETY: each handle is released once (the calls set it back to null) and only if
        // the library handed it out.
        unsafe {
            if !self.context.is_null() {
                (gss.delete_sec_context)(&mut minor, &mut self.context, ptr::null_mut());
            }
            if !self.cred.is_null() {
                (gss.release_cred)(&mut minor, &mut self.cred);
            }
            if !self.target.is_null() {
                (gss.release_name)(&mut minor, &mut self.target);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The library (MIT's, on the test machines) loads and describes its own status codes;
    /// a cache that does not exist is "no credentials", named by the cache.
    #[test]
    fn the_system_library_loads_and_explains_a_missing_ticket_cache() {
        let Ok(gss) = library() else {
            println!("skipping: no GSSAPI library on this machine");
            return;
        };
        let text = gss.status_text(11 << 16, GSS_C_GSS_CODE);
        assert!(text.contains("expired"), "{text}");
        let mut s = System::new("kafka", "localhost", Some("nobody@KDIRECT.INVALID"), None);
        // The principal's realm has no KDC and no cache holds it.
        let e = s.init(None).unwrap_err();
        assert_eq!(e.step, "gss_acquire_cred", "{e}");
        assert_eq!(e.failure, KerberosFailure::NoCredentials, "{e}");
        assert_eq!(e.principal.as_deref(), Some("nobody@KDIRECT.INVALID"));
        assert!(!e.status.is_empty(), "{e}");
    }
}
