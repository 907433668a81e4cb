// ---- code objects: clang offload bundles, the AMDGPU metadata note, each kernel's arguments --------
//
// A HIP executable registers a clang offload bundle (__hipRegisterFatBinary), plain or compressed
// (CCOB, clang's --offload-compress); hipModuleLoadData gets a bundle or a bare code object. The recorder keeps the bytes (written once to images/ as
// the launch's code image; Python extracts the code object for the arch: mneme_hip.bundle) and
// reads each kernel's explicit arguments (offset, size) from the code object's AMDGPU metadata
// note (msgpack, "amdhsa.kernels"), which is how it packs a launch's argument buffer.

const char BUNDLE_MAGIC[] = "__CLANG_OFFLOAD_BUNDLE__";  // 24 bytes
const char COMPRESSED_MAGIC[] = "CCOB";

// The size of a bundle (plain: the end of its last entry; compressed, version 2 or 3: its header's
// total size), or of a bare ELF code object (the end of its section headers); 0 when unknown.
size_t image_size(const uint8_t *p) {
    if (memcmp(p, BUNDLE_MAGIC, 24) == 0) {
        uint64_t count, end = 32;
        memcpy(&count, p + 24, 8);
        size_t pos = 32;
        for (uint64_t i = 0; i < count && i < 4096; ++i) {
            uint64_t offset, size, triple_size;
            memcpy(&offset, p + pos, 8), memcpy(&size, p + pos + 8, 8), memcpy(&triple_size, p + pos + 16, 8);
            pos += 24 + triple_size;
            end = std::max<uint64_t>({end, offset + size, pos});
        }
        return end;
    }
    if (memcmp(p, COMPRESSED_MAGIC, 4) == 0) {
        uint16_t version;
        memcpy(&version, p + 4, 2);
        if (version == 2) {
            uint32_t total;
            memcpy(&total, p + 8, 4);
            return total;
        }
        if (version == 3) {
            uint64_t total;
            memcpy(&total, p + 8, 8);
            return total;
        }
        return 0;  // version 1 does not say: the bytes up to the end of its mapping are unknown
    }
    if (memcmp(p, "\177ELF", 4) == 0 && p[4] == 2) {
        uint64_t shoff;
        uint16_t shentsize, shnum;
        memcpy(&shoff, p + 0x28, 8), memcpy(&shentsize, p + 0x3A, 2), memcpy(&shnum, p + 0x3C, 2);
        return shoff + (uint64_t)shentsize * shnum;
    }
    return 0;
}

// The amdgcn code objects of a plain bundle (a bare code object: itself), as (arch, bytes, size).
struct CodeObject {
    std::string target;
    const uint8_t *data;
    size_t size;
};

std::vector<CodeObject> code_objects(const uint8_t *p, size_t n) {
    std::vector<CodeObject> out;
    if (n >= 4 && memcmp(p, "\177ELF", 4) == 0) {
        out.push_back({"", p, n});
        return out;
    }
    if (n < 32 || memcmp(p, BUNDLE_MAGIC, 24) != 0) return out;
    uint64_t count;
    memcpy(&count, p + 24, 8);
    size_t pos = 32;
    for (uint64_t i = 0; i < count && pos + 24 <= n; ++i) {
        uint64_t offset, size, triple_size;
        memcpy(&offset, p + pos, 8), memcpy(&size, p + pos + 8, 8), memcpy(&triple_size, p + pos + 16, 8);
        if (pos + 24 + triple_size > n) break;
        std::string triple(reinterpret_cast<const char *>(p + pos + 24), triple_size);
        pos += 24 + triple_size;
        if (triple.find("amdgcn") != std::string::npos && offset + size <= n && size > 0)
            out.push_back({triple, p + offset, size});
    }
    return out;
}

// A reader of the msgpack subset the AMDGPU metadata uses.
struct MsgPack {
    const uint8_t *p, *end;
    bool ok = true;

    uint64_t be(int bytes) {
        uint64_t v = 0;
        if (end - p < bytes) return ok = false, 0;
        for (int i = 0; i < bytes; ++i) v = v << 8 | *p++;
        return v;
    }
    // The next value's kind: 'm' map, 'a' array, 's' string, 'i' integer, 'o' other; n: its length or value.
    char next(uint64_t &n) {
        if (p >= end) return ok = false, 'o';
        uint8_t t = *p++;
        if (t <= 0x7f) return n = t, 'i';
        if (t >= 0xe0) return n = (uint64_t)(int64_t)(int8_t)t, 'i';
        if ((t & 0xf0) == 0x80) return n = t & 0x0f, 'm';
        if ((t & 0xf0) == 0x90) return n = t & 0x0f, 'a';
        if ((t & 0xe0) == 0xa0) return n = t & 0x1f, 's';
        switch (t) {
        case 0xcc: case 0xd0: return n = be(1), 'i';
        case 0xcd: case 0xd1: return n = be(2), 'i';
        case 0xce: case 0xd2: return n = be(4), 'i';
        case 0xcf: case 0xd3: return n = be(8), 'i';
        case 0xd9: return n = be(1), 's';
        case 0xda: return n = be(2), 's';
        case 0xdb: return n = be(4), 's';
        case 0xc4: n = be(1); skip_bytes(n); return 'o';
        case 0xc5: n = be(2); skip_bytes(n); return 'o';
        case 0xc6: n = be(4); skip_bytes(n); return 'o';
        case 0xca: skip_bytes(4); return 'o';
        case 0xcb: skip_bytes(8); return 'o';
        case 0xdc: return n = be(2), 'a';
        case 0xdd: return n = be(4), 'a';
        case 0xde: return n = be(2), 'm';
        case 0xdf: return n = be(4), 'm';
        default: return n = 0, 'o';  // nil, true, false
        }
    }
    void skip_bytes(uint64_t n) {
        if ((uint64_t)(end - p) < n) ok = false, p = end;
        else p += n;
    }
    std::string str(uint64_t n) {
        if ((uint64_t)(end - p) < n) return ok = false, "";
        std::string s(reinterpret_cast<const char *>(p), n);
        p += n;
        return s;
    }
    void skip() {
        uint64_t n;
        char k = next(n);
        if (k == 's') skip_bytes(n);
        else if (k == 'a') for (uint64_t i = 0; i < n && ok; ++i) skip();
        else if (k == 'm') for (uint64_t i = 0; i < 2 * n && ok; ++i) skip();
    }
    bool key(std::string &out) {
        uint64_t n;
        if (next(n) != 's') return false;
        out = str(n);
        return ok;
    }
};

// A kernel's explicit arguments as (offset, size), in order.
using ArgLayout = std::vector<std::pair<size_t, size_t>>;

// Every kernel's explicit arguments from one kernel's metadata map (the reader at its start).
void read_kernel(MsgPack &m, std::map<std::string, ArgLayout> &out) {
    uint64_t fields;
    if (m.next(fields) != 'm') return;
    std::string name, k;
    ArgLayout layout;
    for (uint64_t f = 0; f < fields && m.ok; ++f) {
        if (!m.key(k)) return;
        uint64_t n;
        if (k == ".name") {
            if (m.next(n) != 's') return;
            name = m.str(n);
        } else if (k == ".args") {
            if (m.next(n) != 'a') return;
            for (uint64_t a = 0; a < n && m.ok; ++a) {
                uint64_t af;
                if (m.next(af) != 'm') return;
                uint64_t offset = 0, size = 0;
                std::string kind, ak;
                for (uint64_t i = 0; i < af && m.ok; ++i) {
                    if (!m.key(ak)) return;
                    uint64_t v;
                    if (ak == ".offset" || ak == ".size") {
                        if (m.next(v) != 'i') return;
                        (ak == ".offset" ? offset : size) = v;
                    } else if (ak == ".value_kind") {
                        if (m.next(v) != 's') return;
                        kind = m.str(v);
                    } else {
                        m.skip();
                    }
                }
                if (kind.compare(0, 7, "hidden_") != 0) layout.emplace_back(offset, size);
            }
        } else {
            m.skip();
        }
    }
    if (!name.empty()) out[name] = layout;
}

// The kernels of one ELF code object and their explicit arguments (from its NT_AMDGPU_METADATA note).
std::map<std::string, ArgLayout> kernel_layouts(const uint8_t *p, size_t n) {
    std::map<std::string, ArgLayout> out;
    if (n < 64 || memcmp(p, "\177ELF", 4) != 0 || p[4] != 2) return out;
    uint64_t shoff;
    uint16_t shentsize, shnum;
    memcpy(&shoff, p + 0x28, 8), memcpy(&shentsize, p + 0x3A, 2), memcpy(&shnum, p + 0x3C, 2);
    for (uint16_t i = 0; i < shnum; ++i) {
        const uint8_t *sh = p + shoff + (uint64_t)i * shentsize;
        if (sh + 64 > p + n) break;
        uint32_t type;
        uint64_t offset, size;
        memcpy(&type, sh + 4, 4), memcpy(&offset, sh + 0x18, 8), memcpy(&size, sh + 0x20, 8);
        if (type != 7 /* SHT_NOTE */ || offset + size > n) continue;
        for (uint64_t pos = offset; pos + 12 <= offset + size;) {
            uint32_t namesz, descsz, ntype;
            memcpy(&namesz, p + pos, 4), memcpy(&descsz, p + pos + 4, 4), memcpy(&ntype, p + pos + 8, 4);
            uint64_t desc = pos + 12 + ((namesz + 3) & ~3u);
            if (desc + descsz > offset + size) break;
            if (ntype == 32 && namesz == 7 && memcmp(p + pos + 12, "AMDGPU", 7) == 0) {
                MsgPack m{p + desc, p + desc + descsz};
                uint64_t entries;
                if (m.next(entries) == 'm')
                    for (uint64_t e = 0; e < entries && m.ok; ++e) {
                        std::string k;
                        if (!m.key(k)) break;
                        uint64_t count;
                        if (k != "amdhsa.kernels") {
                            m.skip();
                        } else if (m.next(count) == 'a') {
                            for (uint64_t c = 0; c < count && m.ok; ++c) read_kernel(m, out);
                        }
                    }
            }
            pos = desc + ((descsz + 3) & ~3u);
        }
    }
    return out;
}

// A device global of an image: registered by the program (__hipRegisterVar, its host shadow
// variable, whose device address hipGetSymbolAddress gives) or looked up (hipModuleGetGlobal).
struct Global {
    const void *host = nullptr;  // the host shadow, or nullptr when `addr` is known
    uint64_t addr = 0;
    size_t size = 0;
};

// One loaded code image: its bytes (copied: a module's may be freed after loading) and kernels.
struct Image {
    std::string data;
    const char *kind;  // "hipfb" (an offload bundle) or "hsaco" (a bare code object)
    std::map<std::string, ArgLayout> layouts;
    std::map<std::string, Global> globals;  // by device symbol name
    std::string file;  // images/<name> once written
    bool failed = false;
};

// What a launch handle stands for.
struct Kernel {
    std::string name;
    Image *image = nullptr;
};

struct Registry {
    std::mutex mu;
    std::vector<Image *> images;
    std::map<const void *, Kernel> kernels;  // host stub (hipLaunchKernel) or hipFunction_t
    std::map<void *, Image *> modules;       // __hipRegisterFatBinary's handle or hipModule_t
};

Registry &registry() {
    static auto *r = new Registry();
    return *r;
}

// The plain bundle inside a compressed one (CCOB: zstd or zlib, by its header; the libraries are
// opened at run time, as the snapshot writer opens libzstd), or "" when it cannot be had.
std::string decompress_bundle(const uint8_t *p, size_t n) {
    uint16_t version, method;
    memcpy(&version, p + 4, 2), memcpy(&method, p + 6, 2);
    uint64_t total = n, size;
    size_t header;
    if (version == 1) {
        uint32_t s;
        memcpy(&s, p + 8, 4);
        size = s, header = 20;
    } else if (version == 2) {
        uint32_t t, s;
        memcpy(&t, p + 8, 4), memcpy(&s, p + 12, 4);
        total = t, size = s, header = 24;
    } else if (version == 3) {
        memcpy(&total, p + 8, 8), memcpy(&size, p + 16, 8);
        header = 32;
    } else {
        return "";
    }
    if (total > n || total < header || size > (1ull << 32)) return "";
    std::string out(size, '\0');
    if (method == 1) {  // zstd
        static void *lib = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
        using fn_t = size_t (*)(void *, size_t, const void *, size_t);
        using err_t = unsigned (*)(size_t);
        auto fn = lib ? reinterpret_cast<fn_t>(dlsym(lib, "ZSTD_decompress")) : nullptr;
        auto is_error = lib ? reinterpret_cast<err_t>(dlsym(lib, "ZSTD_isError")) : nullptr;
        if (!fn || !is_error) return "";
        size_t got = fn(&out[0], size, p + header, total - header);
        return is_error(got) || got != size ? "" : out;
    }
    if (method == 0) {  // zlib
        static void *lib = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
        using fn_t = int (*)(unsigned char *, unsigned long *, const unsigned char *, unsigned long);
        auto fn = lib ? reinterpret_cast<fn_t>(dlsym(lib, "uncompress")) : nullptr;
        unsigned long got = size;
        if (!fn || fn(reinterpret_cast<unsigned char *>(&out[0]), &got, p + header, total - header) != 0 || got != size)
            return "";
        return out;
    }
    return "";
}

// Keep a code image and read its kernels' arguments (the code objects of every arch: they agree).
Image *add_image(const uint8_t *p, size_t n) {
    auto *img = new Image();
    img->data.assign(reinterpret_cast<const char *>(p), n);
    img->kind = memcmp(p, "\177ELF", 4) == 0 ? "hsaco" : "hipfb";
    std::string plain = memcmp(p, COMPRESSED_MAGIC, 4) == 0 ? decompress_bundle(p, n) : img->data;
    const uint8_t *bytes = reinterpret_cast<const uint8_t *>(plain.data());
    for (const CodeObject &co : code_objects(bytes, plain.size()))
        for (auto &k : kernel_layouts(co.data, co.size)) img->layouts.insert(k);
    std::lock_guard<std::mutex> lock(registry().mu);
    registry().images.push_back(img);
    return img;
}
