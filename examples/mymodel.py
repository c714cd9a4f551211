"""Example pipeline for autotune: a synthetic image dataset with CPU-heavy augmentation and a small CNN."""

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

_MEAN = (0.485, 0.456, 0.406)
_STD = (0.229, 0.224, 0.225)
_LUMA = (0.299, 0.587, 0.114)
_SHARPEN = ((0.0, -1.0, 0.0), (-1.0, 5.0, -1.0), (0.0, -1.0, 0.0))


def _gaussian_kernel(size: int, sigma: float) -> torch.Tensor:
    coords = torch.arange(size, dtype=torch.float32) - (size - 1) / 2
    g = torch.exp(-(coords**2) / (2 * sigma**2))
    g = g / g.sum()
    return torch.outer(g, g).expand(3, 1, size, size)


def _depthwise(img: torch.Tensor, kernel: torch.Tensor, mode: str) -> torch.Tensor:
    pad = kernel.shape[-1] // 2
    return F.conv2d(F.pad(img.unsqueeze(0), (pad,) * 4, mode=mode), kernel, groups=3).squeeze(0)


class SyntheticImages(Dataset):
    """Map-style dataset of synthetic RGB images with a CPU-heavy augmentation pipeline.

    Sample ``i`` is generated on the fly from a generator seeded with ``seed + i``,
    so the dataset is deterministic and keeps nothing in memory. Each sample is
    rendered as a smooth multi-scale noise image (tinted by its label) at 1.5x
    the output size, then goes through a torchvision-style augmentation chain
    written in plain torch: random resized crop, horizontal flip, rotation,
    colour jitter, gaussian blur, gamma, sharpening, noise, normalisation and
    random erasing. The chain costs real CPU time (about 1.5-2 ms per sample on
    a small CPU), so a single-process DataLoader is the training bottleneck.
    """

    def __init__(self, length: int = 4096, image_size: int = 64, num_classes: int = 10, seed: int = 0):
        self.length = length
        self.image_size = image_size
        self.num_classes = num_classes
        self.seed = seed
        self.raw_size = image_size * 3 // 2
        self.octaves = (4, 8, 16)
        self.blur_size = 9
        self._mean = torch.tensor(_MEAN).view(3, 1, 1)
        self._std = torch.tensor(_STD).view(3, 1, 1)
        self._luma = torch.tensor(_LUMA).view(3, 1, 1)
        self._sharpen = torch.tensor(_SHARPEN).expand(3, 1, 3, 3)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < self.length:
            raise IndexError(f"index {index} out of range for dataset of length {self.length}")
        g = torch.Generator().manual_seed(self.seed + index)
        label = int(torch.randint(self.num_classes, (), generator=g))
        raw = self._render(label, g)
        return self._augment(raw, g), torch.tensor(label, dtype=torch.int64)

    def _render(self, label: int, g: torch.Generator) -> torch.Tensor:
        size = self.raw_size
        base = sum(
            F.interpolate(torch.rand(1, 3, c, c, generator=g), size=(size, size), mode="bicubic", align_corners=False)
            * 0.5**octave
            for octave, c in enumerate(self.octaves)
        )[0]
        base = base / sum(0.5**octave for octave in range(len(self.octaves)))
        tint = torch.tensor([label % 3, (label // 3) % 3, label % 2], dtype=torch.float32).view(3, 1, 1)
        grain = torch.randint(0, 64, (3, size, size), dtype=torch.uint8, generator=g)
        return (base * 160 + tint * 64 + grain).clamp_(0, 255).to(torch.uint8)

    def _augment(self, raw: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        size, out = self.raw_size, self.image_size
        p = torch.rand(17, generator=g).tolist()

        area = size * size * (0.35 + 0.65 * p[0])
        ratio = math.exp(math.log(3 / 4) + p[1] * math.log(16 / 9))
        w = min(size, round(math.sqrt(area * ratio)))
        h = min(size, round(math.sqrt(area / ratio)))
        top, left = int(p[2] * (size - h + 1)), int(p[3] * (size - w + 1))
        img = raw[:, top : top + h, left : left + w].float().div_(255).unsqueeze(0)
        img = F.interpolate(img, size=(out, out), mode="bilinear", antialias=True, align_corners=False)

        if p[4] < 0.5:
            img = img.flip(-1)

        angle = math.radians((p[5] - 0.5) * 30)
        cos, sin = math.cos(angle), math.sin(angle)
        theta = torch.tensor([[[cos, -sin, 0.0], [sin, cos, 0.0]]])
        grid = F.affine_grid(theta, list(img.shape), align_corners=False)
        img = F.grid_sample(img, grid, mode="bilinear", padding_mode="reflection", align_corners=False)[0]

        img = img * (0.8 + 0.4 * p[6])
        mean = img.mean()
        img = (img - mean) * (0.8 + 0.4 * p[7]) + mean
        gray = (img * self._luma).sum(0, keepdim=True)
        img = ((img - gray) * (0.8 + 0.4 * p[8]) + gray).clamp_(1e-6, 1)

        img = _depthwise(img, _gaussian_kernel(self.blur_size, 0.1 + 1.9 * p[9]), "reflect")
        img = img.pow_(0.8 + 0.4 * p[10])
        img = torch.lerp(img, _depthwise(img, self._sharpen, "replicate"), p[11])
        img = img + torch.randn(img.shape, generator=g) * (0.05 * p[12])
        img = (img - self._mean) / self._std

        eh, ew = int(out * (0.1 + 0.3 * p[13])), int(out * (0.1 + 0.3 * p[14]))
        et, el = int(p[15] * (out - eh)), int(p[16] * (out - ew))
        img[:, et : et + eh, el : el + ew] = torch.randn(3, eh, ew, generator=g)
        return img.contiguous()


class SmallCNN(nn.Module):
    """Light convolutional classifier for SyntheticImages.

    Three conv-BN-ReLU stages with max pooling, global average pooling and a
    linear head. It is deliberately cheap so that, on a CPU, the data pipeline
    rather than the model limits training throughput, which is the situation
    autotune's DataLoader knobs are meant to fix. ``stem`` puts a strided
    conv-BN-ReLU in front (half the resolution, so each stage costs a quarter).
    """

    def __init__(self, num_classes: int = 10, width: int = 16, stem: bool = False):
        super().__init__()
        layers: list[nn.Module] = []
        in_ch = 3
        if stem:
            layers += [
                nn.Conv2d(3, width, 3, stride=2, padding=1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
            ]
            in_ch = width
        for out_ch in (width, width * 2, width * 4):
            layers += [
                nn.Conv2d(in_ch, out_ch, 3, padding=1, bias=False),
                nn.BatchNorm2d(out_ch),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
            ]
            in_ch = out_ch
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(in_ch, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.pool(self.features(x)), 1))
