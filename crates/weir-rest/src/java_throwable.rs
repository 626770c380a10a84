//! A failure as Flink's REST clients expect it: a `SerializedThrowable`.
//!
//! Flink reports why an asynchronous operation (a savepoint, a triggered checkpoint) failed as
//! `{"class": …, "stack-trace": …, "serialized-throwable": <base64>}`, and its client rebuilds
//! the exception by Java-deserialising the base64 bytes into
//! `org.apache.flink.util.SerializedThrowable`. An object the client cannot deserialise makes
//! it fail with a mapping error instead of the reason, so this module writes the bytes of a
//! real `SerializedThrowable` in Java's object serialization stream format (version 5) by
//! hand: the class descriptors of `SerializedThrowable`, `Exception` and `Throwable` with
//! their `serialVersionUID`s, then the message, the original class name and the printed
//! stack trace. Fields the stream leaves out (cause, stack trace elements, suppressed
//! exceptions) take the defaults `Throwable.readObject` expects from older streams.

use serde::Serialize;

const STREAM_MAGIC: u16 = 0xACED;
const STREAM_VERSION: u16 = 5;
const TC_NULL: u8 = 0x70;
const TC_CLASSDESC: u8 = 0x72;
const TC_OBJECT: u8 = 0x73;
const TC_STRING: u8 = 0x74;
const TC_ENDBLOCKDATA: u8 = 0x78;
const TC_LONGSTRING: u8 = 0x7C;
const SC_WRITE_METHOD: u8 = 0x01;
const SC_SERIALIZABLE: u8 = 0x02;

const SERIALIZED_THROWABLE: &str = "org.apache.flink.util.SerializedThrowable";
const SERIALIZED_THROWABLE_UID: i64 = 7_284_183_123_441_947_635;
const EXCEPTION_UID: i64 = -3_387_516_993_124_229_948;
const THROWABLE_UID: i64 = -3_042_686_055_658_047_285;

/// The class name failures are reported under.
pub const FAILURE_CLASS: &str = "weir.CheckpointException";

/// A failure cause in Flink's JSON form.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SerializedThrowable {
    pub class: String,
    #[serde(rename = "stack-trace")]
    pub stack_trace: String,
    /// Base64 of the Java serialization of `org.apache.flink.util.SerializedThrowable`.
    #[serde(rename = "serialized-throwable")]
    pub serialized_throwable: String,
}

impl SerializedThrowable {
    /// A failure with `message`, reported as a [`FAILURE_CLASS`].
    pub fn new(message: &str) -> SerializedThrowable {
        let stack_trace = format!("{FAILURE_CLASS}: {message}\n");
        let bytes = java_serialized_throwable(message, FAILURE_CLASS, &stack_trace);
        SerializedThrowable {
            class: FAILURE_CLASS.to_string(),
            stack_trace,
            serialized_throwable: base64(&bytes),
        }
    }
}

/// The Java serialization of a `SerializedThrowable` with this message, original class name
/// and printed stack trace (and no serialized original exception).
pub fn java_serialized_throwable(message: &str, class_name: &str, stack_trace: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + message.len() + stack_trace.len());
    out.extend(STREAM_MAGIC.to_be_bytes());
    out.extend(STREAM_VERSION.to_be_bytes());
    out.push(TC_OBJECT);
    // Class descriptors, most derived first, each followed by its superclass's.
    class_desc(
        &mut out,
        SERIALIZED_THROWABLE,
        SERIALIZED_THROWABLE_UID,
        SC_SERIALIZABLE,
        // Object fields in name order, as Java writes them.
        &[
            ('L', "fullStringifiedStackTrace", "Ljava/lang/String;"),
            ('L', "originalErrorClassName", "Ljava/lang/String;"),
            ('[', "serializedException", "[B"),
        ],
    );
    class_desc(
        &mut out,
        "java.lang.Exception",
        EXCEPTION_UID,
        SC_SERIALIZABLE,
        &[],
    );
    class_desc(
        &mut out,
        "java.lang.Throwable",
        THROWABLE_UID,
        SC_SERIALIZABLE | SC_WRITE_METHOD,
        &[('L', "detailMessage", "Ljava/lang/String;")],
    );
    out.push(TC_NULL); // Throwable's superclass, Object, is not serializable
                       // Field values, least derived class first. Throwable has a writeObject method, so its
                       // fields end with a block-data marker.
    string(&mut out, message);
    out.push(TC_ENDBLOCKDATA);
    string(&mut out, stack_trace);
    string(&mut out, class_name);
    out.push(TC_NULL); // serializedException: none
    out
}

fn class_desc(out: &mut Vec<u8>, name: &str, uid: i64, flags: u8, fields: &[(char, &str, &str)]) {
    out.push(TC_CLASSDESC);
    utf(out, name);
    out.extend(uid.to_be_bytes());
    out.push(flags);
    out.extend((fields.len() as u16).to_be_bytes());
    for (code, field, class) in fields {
        out.push(*code as u8);
        utf(out, field);
        string(out, class);
    }
    out.push(TC_ENDBLOCKDATA); // no class annotation
}

/// A new string object.
fn string(out: &mut Vec<u8>, text: &str) {
    let bytes = modified_utf8(text);
    if bytes.len() <= u16::MAX as usize {
        out.push(TC_STRING);
        out.extend((bytes.len() as u16).to_be_bytes());
    } else {
        out.push(TC_LONGSTRING);
        out.extend((bytes.len() as u64).to_be_bytes());
    }
    out.extend(bytes);
}

/// A length-prefixed name inside a descriptor (always short).
fn utf(out: &mut Vec<u8>, text: &str) {
    let bytes = modified_utf8(text);
    let len = bytes.len().min(u16::MAX as usize);
    out.extend((len as u16).to_be_bytes());
    out.extend(&bytes[..len]);
}

/// Java's modified UTF-8: NUL as two bytes, characters beyond the BMP as two 3-byte
/// surrogates.
fn modified_utf8(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for unit in text.encode_utf16() {
        match unit {
            0x0001..=0x007F => out.push(unit as u8),
            0x0000 | 0x0080..=0x07FF => {
                out.push(0xC0 | (unit >> 6) as u8);
                out.push(0x80 | (unit & 0x3F) as u8);
            }
            _ => {
                out.push(0xE0 | (unit >> 12) as u8);
                out.push(0x80 | ((unit >> 6) & 0x3F) as u8);
                out.push(0x80 | (unit & 0x3F) as u8);
            }
        }
    }
    out
}

/// Standard base64 with padding, as Jackson reads binary values.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 0x3F) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet_and_padding() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64(&[0xff, 0xfe]), "//4=");
    }

    #[test]
    fn modified_utf8_encodes_nul_and_supplementary_characters_as_java_does() {
        assert_eq!(modified_utf8("a\0"), vec![b'a', 0xC0, 0x80]);
        assert_eq!(modified_utf8("é"), vec![0xC3, 0xA9]);
        // U+1F600 becomes the surrogates D83D DE00, three bytes each.
        assert_eq!(
            modified_utf8("😀"),
            vec![0xED, 0xA0, 0xBD, 0xED, 0xB8, 0x80]
        );
    }

    #[test]
    fn the_stream_starts_with_javas_magic_and_names_the_flink_class() {
        let bytes = java_serialized_throwable("boom", FAILURE_CLASS, "trace");
        assert_eq!(&bytes[..4], &[0xAC, 0xED, 0x00, 0x05]);
        assert_eq!(bytes[4], TC_OBJECT);
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains(SERIALIZED_THROWABLE));
        assert!(text.contains("boom"));
        assert!(text.contains("java.lang.Throwable"));
    }

    #[test]
    fn a_very_long_message_uses_a_long_string() {
        let long = "x".repeat(70_000);
        let bytes = java_serialized_throwable(&long, FAILURE_CLASS, "t");
        assert!(bytes.windows(1).any(|w| w[0] == TC_LONGSTRING));
    }

    #[test]
    fn the_json_form_carries_class_trace_and_bytes() {
        let t = SerializedThrowable::new("disk full");
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["class"], FAILURE_CLASS);
        assert!(json["stack-trace"].as_str().unwrap().contains("disk full"));
        assert!(json["serialized-throwable"]
            .as_str()
            .unwrap()
            .starts_with("rO0ABX"));
    }
}
