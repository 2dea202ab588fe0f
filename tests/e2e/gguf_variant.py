"""A copy of a GGUF file changed in one place, for the e2e refusal tests (gguf_*_test.sh):
gguf_variant.py SRC DST ARCH EDIT, where EDIT is Python run over `w` (the writer, for metadata)
and `tensors` (name -> array), or "drop KEY" to leave one metadata key out."""
import sys
import gguf
src, dst, arch, edit = sys.argv[1:5]
r = gguf.GGUFReader(src)
w = gguf.GGUFWriter(dst, arch=arch)
skip = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count", "general.architecture"}
drop = edit[len("drop "):] if edit.startswith("drop ") else None
for k, f in r.fields.items():
    if k in skip or k == drop:
        continue
    t = f.types[0]
    if t == gguf.GGUFValueType.ARRAY:
        sub = f.types[-1]
        vals = [bytes(f.parts[i]).decode() if sub == gguf.GGUFValueType.STRING
                else f.parts[i].tolist()[0] for i in f.data]
        w.add_key_value(k, vals, t, sub_type=sub)
    elif t == gguf.GGUFValueType.STRING:
        w.add_key_value(k, bytes(f.parts[f.data[0]]).decode(), t)
    else:
        w.add_key_value(k, f.parts[f.data[0]].tolist()[0], t)
tensors = {t.name: t.data.reshape([int(x) for x in reversed(t.shape)]).copy() for t in r.tensors}
if drop is None:
    exec(edit)
for name, v in tensors.items():
    w.add_tensor(name, v)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
