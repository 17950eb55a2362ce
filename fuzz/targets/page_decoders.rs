//! Every page decoder on arbitrary bytes: none may panic. The input is cut or
//! zero-padded to a 4 KiB page; a variant with a valid checksum and page id is
//! tried too, so the decoders behind the checksum are reached.

use cairn_storage::record::large::LargeDescriptor;
use cairn_storage::record::slotted;
use cairn_storage::volume::groups;
use cairn_storage::volume::header::VolumeHeader;
use cairn_storage::volume::manifest::Manifest;
use cairn_storage::volume::spacemap;
use cairn_storage::{page, PageId, SlotIdx};

fn decode_all(buf: &[u8], id: PageId) {
    let _ = page::verify(buf, id);
    let _ = slotted::check(buf);
    let _ = slotted::live_count(buf);
    let _ = slotted::free_for_insert(buf);
    for r in slotted::iter(buf) {
        if r.is_err() {
            break;
        }
    }
    for s in [0u16, 1, 2, 7, 100, 4095] {
        let _ = slotted::get(buf, SlotIdx(s));
    }
    let _ = groups::read_dir(buf, id);
    let _ = groups::read_list(buf, id);
    let _ = spacemap::check(buf, 0);
    let _ = VolumeHeader::precheck(buf, 4096, std::path::Path::new("fuzz"));
    let _ = VolumeHeader::load(buf, 4096, 1, std::path::Path::new("fuzz"));
    let _ = LargeDescriptor::decode(&buf[..LargeDescriptor::ENCODED_SIZE.min(buf.len())], id);
    let _ = Manifest::decode(&buf[..36], std::path::Path::new("fuzz"));
    // Mutating paths on a copy: they must fail cleanly on damage, too.
    let mut copy = buf.to_vec();
    let _ = slotted::insert(&mut copy, 1, b"fuzz data");
    let mut copy = buf.to_vec();
    let _ = slotted::update(&mut copy, SlotIdx(0), 1, &[7u8; 300]);
    let mut copy = buf.to_vec();
    let _ = slotted::delete(&mut copy, SlotIdx(0));
}

/// Runs the target on one input; panics only on a bug.
pub fn run(data: &[u8]) {
    let mut buf = vec![0u8; 4096];
    let n = data.len().min(4096);
    buf[..n].copy_from_slice(&data[..n]);
    let id = page::page_id(&buf);
    decode_all(&buf, id);
    page::seal(&mut buf);
    decode_all(&buf, id);
}
