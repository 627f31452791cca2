// The stb_truetype and stb_rect_pack functions Debian's libimgui.a calls (font atlas building),
// compiled here from stb's headers rather than linked from Debian's libstb.so: the viewer then
// depends on no shared stb, which the pip wheel could not carry (it needs glibc 2.33).
#define STB_RECT_PACK_IMPLEMENTATION
#include <stb/stb_rect_pack.h>

#define STB_TRUETYPE_IMPLEMENTATION
#include <stb/stb_truetype.h>
