from .arithmetic import arithmetic_problems as arithmetic_problems
from .sources import LoadedTexts as LoadedTexts
from .sources import load_math_problems as load_math_problems
from .sources import load_set as load_set
from .sources import load_texts as load_texts
from .sources import problem_sha256 as problem_sha256
