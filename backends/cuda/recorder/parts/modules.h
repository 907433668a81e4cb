// ---- code images, modules and device globals ------------------------------------------------------

// One loaded code image. Images inside a loaded ELF file (cudart's fatbins) stay valid for the
// process's life and are only pointed to; others (a JIT's buffer) are copied at load time.
// Written to images/ only when a kernel of the module is recorded.
struct Image {
    const void *data = nullptr;
    std::string owned;
    size_t size = 0;
    const char *kind = "";
    std::string file;  // relative to the recording folder, once written
    bool failed = false;
};

struct Modules {
    std::vector<Image *> images;
    std::unordered_map<void *, size_t> image_of;     // CUmodule / CUlibrary -> index in images
    std::unordered_map<void *, void *> owner_of;     // CUfunction / CUkernel -> CUmodule / CUlibrary
    std::unordered_map<void *, void *> library_of;   // CUmodule -> the CUlibrary it was taken from
    std::map<void *, std::map<std::string, std::pair<CUdeviceptr, size_t>>> globals;  // owner -> name -> (addr, size)
    std::set<void *> libraries;  // owners that are CUlibrary handles
    std::set<void *> scanned;    // owners whose image was searched for device variables
};

Modules &modules() {
    static auto *m = new Modules();
    return *m;
}

void *canonical_owner(void *owner) {
    auto it = modules().library_of.find(owner);
    return it == modules().library_of.end() ? owner : it->second;
}

uint16_t rd16(const unsigned char *p) { uint16_t v; memcpy(&v, p, 2); return v; }
uint32_t rd32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
uint64_t rd64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }

const uint32_t FATBIN_MAGIC = 0xBA55ED50u, FATBIN_WRAPPER_MAGIC = 0x466243b1u;

// The extent of a 64-bit ELF image: the furthest of its headers, section and segment contents.
size_t elf_size(const unsigned char *p) {
    if (p[4] != 2) return 0;  // cubins are ELF64
    uint64_t phoff = rd64(p + 32), shoff = rd64(p + 40);
    uint16_t phentsize = rd16(p + 54), phnum = rd16(p + 56), shentsize = rd16(p + 58), shnum = rd16(p + 60);
    uint64_t end = std::max<uint64_t>(64, shoff + (uint64_t)shnum * shentsize);
    end = std::max<uint64_t>(end, phoff + (uint64_t)phnum * phentsize);
    for (unsigned i = 0; shoff && i < shnum; ++i) {
        const unsigned char *sh = p + shoff + (uint64_t)i * shentsize;
        if (rd32(sh + 4) != 8) end = std::max<uint64_t>(end, rd64(sh + 24) + rd64(sh + 32));  // not SHT_NOBITS
    }
    for (unsigned i = 0; phoff && i < phnum; ++i) {
        const unsigned char *ph = p + phoff + (uint64_t)i * phentsize;
        end = std::max<uint64_t>(end, rd64(ph + 8) + rd64(ph + 32));
    }
    return end;
}

// What a module-load call was given: a fatbin (possibly behind cudart's wrapper), a cubin or PTX.
const void *image_extent(const void *code, size_t *size, const char **kind) {
    const unsigned char *p = static_cast<const unsigned char *>(code);
    *size = 0;
    *kind = "";
    if (!p) return nullptr;
    uint32_t magic = rd32(p);
    if (magic == FATBIN_WRAPPER_MAGIC) {  // {int magic; int version; const void *fatbin; void *rest}
        const void *inner;
        memcpy(&inner, p + 8, sizeof inner);
        return image_extent(inner, size, kind);
    }
    if (magic == FATBIN_MAGIC) {
        *size = rd16(p + 6) + rd64(p + 8);
        *kind = "fatbin";
    } else if (memcmp(p, "\x7f" "ELF", 4) == 0) {
        *size = elf_size(p);
        *kind = "cubin";
    } else {
        *size = strlen(reinterpret_cast<const char *>(p)) + 1;
        *kind = "ptx";
    }
    return p;
}

// The device variables (__device__, __constant__) a cubin defines: OBJECT symbols of its
// .nv.global* and .nv.constant3 sections. cudart resolves only the ones the host touches
// (cudaMemcpyToSymbol, ...), so the recorder also looks these up itself at a recorded launch.
void cubin_globals(const unsigned char *p, size_t size, std::vector<std::string> &names) {
    if (size < 64 || memcmp(p, "\x7f" "ELF", 4) != 0 || p[4] != 2) return;
    uint64_t shoff = rd64(p + 40);
    uint16_t shentsize = rd16(p + 58), shnum = rd16(p + 60), shstrndx = rd16(p + 62);
    if (shentsize < 64 || shoff + (uint64_t)shnum * shentsize > size || shstrndx >= shnum) return;
    auto sh = [&](unsigned i) { return p + shoff + (uint64_t)i * shentsize; };
    auto in_file = [&](uint64_t off, uint64_t len) { return off <= size && len <= size - off; };
    uint64_t shstr_off = rd64(sh(shstrndx) + 24), shstr_size = rd64(sh(shstrndx) + 32);
    if (!in_file(shstr_off, shstr_size)) return;
    auto section_name = [&](unsigned i) -> std::string {
        uint32_t n = rd32(sh(i));
        if (n >= shstr_size) return "";
        const char *s = reinterpret_cast<const char *>(p + shstr_off + n);
        return std::string(s, strnlen(s, shstr_size - n));
    };
    for (unsigned i = 0; i < shnum; ++i) {
        if (rd32(sh(i) + 4) != 2) continue;  // SHT_SYMTAB
        uint64_t off = rd64(sh(i) + 24), len = rd64(sh(i) + 32), entsize = rd64(sh(i) + 56);
        uint32_t link = rd32(sh(i) + 40);
        if (entsize < 24 || link >= shnum || !in_file(off, len)) continue;
        uint64_t str_off = rd64(sh(link) + 24), str_size = rd64(sh(link) + 32);
        if (!in_file(str_off, str_size)) continue;
        for (uint64_t sym = off; sym + 24 <= off + len; sym += entsize) {
            uint32_t name = rd32(p + sym);
            unsigned char info = p[sym + 4];
            uint16_t shndx = rd16(p + sym + 6);
            if ((info & 0xf) != 1 || shndx == 0 || shndx >= shnum || rd64(p + sym + 16) == 0 || name >= str_size)
                continue;  // STT_OBJECT with a size, in a real section
            std::string section = section_name(shndx);
            if (section.rfind(".nv.global", 0) != 0 && section != ".nv.constant3") continue;
            const char *s = reinterpret_cast<const char *>(p + str_off + name);
            std::string symbol(s, strnlen(s, str_size - name));
            if (!symbol.empty() && symbol[0] != '.' && symbol[0] != '$') names.push_back(symbol);
        }
    }
}


// Decode one zstd frame through the system's libzstd when the process can load it (the
// recorder links nothing the application might lack); false otherwise.
bool zstd_frame(const unsigned char *src, size_t n, size_t size, std::vector<unsigned char> &out) {
    using decompress_t = size_t (*)(void *, size_t, const void *, size_t);
    using is_error_t = unsigned (*)(size_t);
    static void *lib = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
    static auto decompress = lib ? reinterpret_cast<decompress_t>(real_dlsym()(lib, "ZSTD_decompress")) : nullptr;
    static auto is_error = lib ? reinterpret_cast<is_error_t>(real_dlsym()(lib, "ZSTD_isError")) : nullptr;
    using frame_size_t = size_t (*)(const void *, size_t);
    static auto frame_size = lib ? reinterpret_cast<frame_size_t>(real_dlsym()(lib, "ZSTD_findFrameCompressedSize"))
                                 : nullptr;
    if (!decompress || !is_error || !frame_size) return false;
    size_t frame = frame_size(src, n);  // the payload is padded after the frame
    if (is_error(frame) || frame > n) return false;
    out.resize(size);
    size_t got = decompress(out.data(), size, src, frame);
    return !is_error(got) && got == size;
}

// The device variables of an image for a device of `arch` (e.g. 90): a cubin's, or those of a
// fatbin's cubin for that architecture (plain, LZ4-compressed, or zstd when libzstd loads).
void image_globals(const void *data, size_t size, int arch, std::vector<std::string> &names) {
    const unsigned char *p = static_cast<const unsigned char *>(data);
    if (size >= 4 && memcmp(p, "\x7f" "ELF", 4) == 0) return cubin_globals(p, size, names);
    if (size < 16 || rd32(p) != FATBIN_MAGIC) return;
    uint64_t pos = rd16(p + 6), end = std::min<uint64_t>(size, pos + rd64(p + 8));
    while (pos + 64 <= end) {
        uint16_t kind = rd16(p + pos);
        uint32_t header = rd32(p + pos + 4);
        uint64_t payload = rd64(p + pos + 8);
        if (header == 0 || pos + header + payload > end) break;
        if (kind == 2 && (int)rd32(p + pos + 28) == arch) {
            const unsigned char *body = p + pos + header;
            uint64_t flags = rd64(p + pos + 40), decoded = rd64(p + pos + 56);
            std::vector<unsigned char> plain;
            if (payload >= 4 && memcmp(body, "\x7f" "ELF", 4) == 0)
                cubin_globals(body, payload, names);
            else if ((flags & 0x2000) && decoded && decoded < (1ull << 32) && lz4_block(body, payload, decoded, plain))
                cubin_globals(plain.data(), plain.size(), names);
            else if (payload >= 4 && memcmp(body, "\x28\xb5\x2f\xfd", 4) == 0 && decoded && decoded < (1ull << 32) &&
                     zstd_frame(body, payload, decoded, plain))
                cubin_globals(plain.data(), plain.size(), names);
        }
        pos += header + payload;
    }
}

// Remember the image a module or library was loaded from (mu() held).
void note_image(void *owner, const void *code, bool from_file, bool library) {
    if (library) modules().libraries.insert(owner);
    auto *img = new Image();
    if (from_file) {
        FILE *in = fopen(static_cast<const char *>(code), "rb");
        if (!in) {
            delete img;
            return;
        }
        char buf[1 << 16];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, in)) > 0) img->owned.append(buf, n);
        fclose(in);
        const char *kind;
        size_t size;
        if (img->owned.size() < 16 || !image_extent(img->owned.data(), &size, &kind)) {
            delete img;
            return;
        }
        img->kind = kind;
        img->size = std::min(size, img->owned.size());
        img->data = img->owned.data();
    } else {
        const void *p = image_extent(code, &img->size, &img->kind);
        if (!p || !img->size) {
            delete img;
            return;
        }
        Dl_info info;
        if (dladdr(p, &info) && info.dli_fbase) {
            img->data = p;  // static data of a loaded ELF file: valid as long as the process runs
        } else {
            img->owned.assign(static_cast<const char *>(p), img->size);  // the caller may free its buffer
            img->data = img->owned.data();
        }
    }
    Modules &m = modules();
    m.image_of[owner] = m.images.size();
    m.images.push_back(img);
}
